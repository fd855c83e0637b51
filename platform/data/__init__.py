"""Datasets and partitions. Arrays are NumPy (zero-copy through Ray's object store); models see torch."""
from platform.data.datasets import DATASETS, ArrayDataset, check_dataset_available, load_dataset
from platform.data.partition import PARTITIONS, partition_clients

__all__ = ["DATASETS", "PARTITIONS", "ArrayDataset", "check_dataset_available", "load_dataset", "partition_clients"]
