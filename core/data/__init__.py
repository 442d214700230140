"""Data sources: built-in scikit-learn sets, synthetic, CSV, Parquet, NPZ and image folders.

``load_data`` (core.data.prepare) reads a source (core.data.sources, with
image folders in core.data.images), splits it (core.data.split), fits a
table's schema on the training rows and standardises; it returns the types
of core.data.info. ``describe_source`` (core.data.describe) is the picker's
view of a source; core.data.batches makes the training batches.
"""

from core.data.batches import ImageBatches, ImageDataset, TensorBatches, full_tensors, make_batches
from core.data.describe import PREVIEW_IMAGES, PREVIEW_ROWS, describe_columns, describe_source
from core.data.images import IMAGE_SUFFIXES, ImagePrep, decode_image
from core.data.info import DatasetInfo, FeatureSplit, ImageInput, ImageSplit, PreparedData, Split, TensorSplit
from core.data.prepare import fit_table, load_data
from core.data.raw import RawSource
from core.data.sources import BUILTIN_DATASETS, read_source
from core.data.split import random_split, stratified_split
from core.schema import OBVIOUS_TARGETS, propose_target

__all__ = [
    "BUILTIN_DATASETS",
    "DatasetInfo",
    "FeatureSplit",
    "ImageInput",
    "IMAGE_SUFFIXES",
    "ImageBatches",
    "ImageDataset",
    "ImagePrep",
    "ImageSplit",
    "OBVIOUS_TARGETS",
    "PREVIEW_IMAGES",
    "PREVIEW_ROWS",
    "PreparedData",
    "RawSource",
    "Split",
    "TensorBatches",
    "TensorSplit",
    "decode_image",
    "describe_columns",
    "describe_source",
    "fit_table",
    "full_tensors",
    "load_data",
    "make_batches",
    "propose_target",
    "random_split",
    "read_source",
    "stratified_split",
]
