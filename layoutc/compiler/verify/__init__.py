"""The verifier: proves pad-soundness of a checked contract with z3 (docs/verification.md)."""
