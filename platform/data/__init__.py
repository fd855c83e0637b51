"""Datasets and partitions. Arrays are NumPy (zero-copy through Ray's object store); models see torch."""
from platform.data.datasets import DATASETS, ArrayDataset, check_dataset_available, load_dataset
from platform.data.partition import PARTITIONS, partition_clients

__all__ = ["DATASETS", "PARTITIONS", "ArrayDataset", "check_dataset_available", "load_dataset", "partition_clients"]
from platform.data.partition import class_counts  # noqa: E402
from platform.data.splits import (server_validation_split, split_clients, split_fractions,  # noqa: E402
                                  stratified_split)
from platform.data.sampling import client_sampling_probabilities, sample_clients_weighted  # noqa: E402
from platform.data.summary import partition_heatmap, partition_summary  # noqa: E402

__all__ += ["class_counts", "client_sampling_probabilities", "partition_heatmap", "partition_summary",
            "sample_clients_weighted", "server_validation_split", "split_clients", "split_fractions",
            "stratified_split"]
from platform.data.datasets import NORMALIZATIONS, generate_synthetic, load_source_image, normalize  # noqa: E402
from platform.data.public import check_public_available, split_public  # noqa: E402

__all__ += ["NORMALIZATIONS", "check_public_available", "generate_synthetic", "load_source_image", "normalize",
            "split_public"]
