"""Writers: QA Parquet shards, WebDataset shards, the dataset card and the STRIDE-QA-Bench export."""
