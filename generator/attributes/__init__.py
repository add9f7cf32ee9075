"""Attributes stage: ego-centric object attributes, pair relations and behaviour labels (pure functions over
Arrow tables; see ``compute`` and ``labels`` for the exact definitions; vocabularies in ``schemas.vocab``)."""
from generator.attributes.compute import (bearing_deg, clock_from_bearing, compute_attributes, pair_relations,
                                          wrap_deg)
from generator.attributes.labels import compute_labels

__all__ = ["bearing_deg", "clock_from_bearing", "compute_attributes", "pair_relations", "wrap_deg",
           "compute_labels"]
