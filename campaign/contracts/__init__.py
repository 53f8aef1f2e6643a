"""Contracts: schema, safe loading with file:line errors, canonical hashing, freezing, the axis diff."""

from campaign.contracts.freeze import check_frozen, default_record_path, freeze
from campaign.contracts.load import LoadedContract, load_contract
from campaign.contracts.resolve import EffectiveLane, axis_difference
from campaign.contracts.schema import Contract

__all__ = ["Contract", "EffectiveLane", "LoadedContract", "axis_difference", "check_frozen",
           "default_record_path", "freeze", "load_contract"]
