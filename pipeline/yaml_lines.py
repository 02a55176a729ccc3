"""Map a pydantic error location to the line of the YAML node it refers to."""
from __future__ import annotations

import yaml


def line_of(root: yaml.Node | None, loc: tuple) -> int | None:
    """1-based line of the deepest node that exists along `loc` (a key path like ('a', 0, 'b'))."""
    node, line = root, None
    for part in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        node = _child(node, part)
        if node is not None:
            line = node.start_mark.line + 1
    return line


def _child(node: yaml.Node, part) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return value
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return node.value[part]
    return None
