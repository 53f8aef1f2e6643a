"""Receipts: bundle signing (DSSE + in-toto) and strict verification."""

from campaign.receipts.bundle import ENVELOPE, VerifiedBundle, sign_bundle, verify_bundle

__all__ = ["ENVELOPE", "VerifiedBundle", "sign_bundle", "verify_bundle"]
