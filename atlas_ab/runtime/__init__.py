"""The target runtime: a compact Llama-family decoder, its ragged KV pool, the MTP module, checkpoints."""
from atlas_ab.runtime.config import ModelArgs
from atlas_ab.runtime.kv import KVPool
from atlas_ab.runtime.model import DecoderLayer, MTPModule, Transformer

__all__ = ["ModelArgs", "KVPool", "Transformer", "DecoderLayer", "MTPModule"]
