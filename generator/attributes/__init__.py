"""Attributes stage: ego-centric object attributes, pair relations and behaviour labels (pure functions over
Arrow tables; see ``compute`` and ``labels`` for the exact definitions)."""
from generator.attributes.compute import (bearing_deg, clock_from_bearing, compute_attributes, pair_relations,
                                          wrap_deg)
from generator.attributes.labels import (INTENT_LATERAL, INTENT_VERTICAL, MANEUVERS, SPEED_STATUS, VRU_CLASSES,
                                         LabelThresholds, compute_labels)

__all__ = ["bearing_deg", "clock_from_bearing", "compute_attributes", "pair_relations", "wrap_deg",
           "compute_labels", "LabelThresholds", "MANEUVERS", "SPEED_STATUS", "INTENT_LATERAL", "INTENT_VERTICAL",
           "VRU_CLASSES"]
