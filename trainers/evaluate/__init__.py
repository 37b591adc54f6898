"""The evaluator (every arm on the same test tasks: ``python -m trainers.evaluate``) and the factorized
comparison (``python -m trainers.evaluate.factorized``), with their trajectory cache and report writer."""
