"""The paper families that ship with drivegen, one package each (``schemas.families`` is the contract and
the registry; nothing outside a family's package imports it, and no family imports another)."""
