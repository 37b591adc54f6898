"""What a deployed agent imports: the controller hooks (and the runtime API) that load an exported
controller and decide. Needs torch and the featurizers; never Lightning or TRL."""
