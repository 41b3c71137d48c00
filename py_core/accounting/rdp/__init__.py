"""Rényi DP: conversions, the RDP accountant and the individual Rényi filter."""
