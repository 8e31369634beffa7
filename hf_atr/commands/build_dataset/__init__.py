"""``hf-atr build-dataset``: its parser (``command``), the table of builders (``dataset_builders``), their
options (``builder_options``) and rows (``builder_rows``), the builders of moment and shard datasets, and the
writing of the result (``dataset_output``)."""
