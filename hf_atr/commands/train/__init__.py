"""``hf-atr train``: its parser (``command``), its typed arguments (``train_arguments``), the run (``fine_tune``),
the training data (``training_data``) and the on-disk feature cache (``feature_cache``)."""
