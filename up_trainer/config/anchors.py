"""Top-level keys that exist only to hold a YAML anchor.

UP files declare shared values once at the top level and alias them where they are used::

    num_classes: &num_classes 1000
    flip: &flip {type: flip, kwargs: {flip_p: 0.5}}
    ...
    net: [{..., kwargs: {num_classes: *num_classes}}]

Such a key is not a section; once the aliases are resolved it has done its job. Which keys they
are is decided from the YAML event stream, not from the parsed dict: a top-level value node that
carries an anchor aliased somewhere else in the file. A top-level key with no anchor, or whose
anchor nothing aliases, stays in the config and meets the usual "unknown section" check.

UP's multitask files also group anchored values under a few top-level keys (``augs: {det: {flip:
&flip {...}}}``, ``settings``, ``norms``); those keys, named in :data:`ANCHOR_GROUPS`, count as
anchor holders when something inside them is aliased. Only these names: a key UP's runners
read (``multitask_cfg``, ``mimic``) holds anchors too and must never be dropped.
"""
import yaml
from yaml.events import (AliasEvent, CollectionEndEvent, CollectionStartEvent, MappingStartEvent, NodeEvent,
                         ScalarEvent)

ANCHOR_GROUPS = ("augs", "settings", "norms")


def anchor_only_keys(text):
    """Names of the top-level keys whose value carries an anchor that is aliased elsewhere.

    Returns an empty set for text that is not a top-level mapping; malformed YAML is left to
    the parser, which reports it with its line.
    """
    anchored = {}  # anchor name -> top-level key holding it
    aliased = set()
    depth = 0  # collection nesting; 1 = inside the top-level mapping
    top_is_mapping = False
    expecting_key = True  # at depth 1: the next node is a key (True) or its value (False)
    key = None
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, AliasEvent):
                aliased.add(event.anchor)
            if not isinstance(event, (NodeEvent, CollectionEndEvent)):
                continue
            if isinstance(event, CollectionEndEvent):
                depth -= 1
                continue
            if depth == 0:
                top_is_mapping = isinstance(event, MappingStartEvent)
            elif depth == 1 and top_is_mapping:
                if expecting_key:
                    key = event.value if isinstance(event, ScalarEvent) else None
                elif key is not None and not isinstance(event, AliasEvent) and event.anchor:
                    anchored[event.anchor] = key
                expecting_key = not expecting_key
            elif depth > 1 and top_is_mapping and key in ANCHOR_GROUPS and not isinstance(event, AliasEvent) \
                    and event.anchor:
                anchored.setdefault(event.anchor, key)
            if isinstance(event, CollectionStartEvent):
                depth += 1
    except yaml.YAMLError:
        return set()
    return {key for anchor, key in anchored.items() if anchor in aliased}
