"""Controller training: Lightning fits of probes and gates, calibration, metrics, baselines, model cards."""
