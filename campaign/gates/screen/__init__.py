"""Screens: offline gates run before any lane boots."""
