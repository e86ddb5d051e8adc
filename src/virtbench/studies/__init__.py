"""The studies' published findings as checkable claims (claims.py), the pure scoring of a claim
against measured evidence (score.py), and the evidence read from stored runs (evidence.py)."""
