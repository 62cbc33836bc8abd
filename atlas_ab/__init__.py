"""atlas_ab: acceptance A/B studies of speculative-decoding drafters."""

__version__ = "0.1.0"


class AtlasError(Exception):
    """Bad input: the message is one line naming the thing that is wrong."""
