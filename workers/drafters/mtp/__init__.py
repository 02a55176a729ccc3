"""The MTP family: multi-token-prediction heads (workers/drafters/mtp/model.py)."""
