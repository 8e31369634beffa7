"""``hf-atr train``: its entry (``command``), its parser (``train_arguments``) over the argument dataclasses
(``model_arguments``, ``data_arguments``, ``evaluation_arguments``, ``training_arguments``; ``option_values``), the
run (``fine_tune``), the training data (``training_data``) and the on-disk feature cache (``feature_cache``)."""
