"""The target runtime: a compact Llama-family decoder, its ragged KV pool, the MTP module, checkpoints.

See docs/runtime_api.md for the contract.
"""
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.checkpoint import Checkpoint, load, save
from atlas_ab.runtime.kv import KVPool
from atlas_ab.runtime.model import DecoderLayer, MTPModule, Transformer, init_weights

__all__ = ["ModelArgs", "KVPool", "Transformer", "DecoderLayer", "MTPModule", "init_weights",
           "Checkpoint", "load", "save"]
