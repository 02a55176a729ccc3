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


def duplicate_keys(root: yaml.Node | None, loc: tuple = ()) -> list[tuple[tuple, int, int]]:
    """Every key given twice in one mapping, anywhere in the tree: (path of the key, first line,
    second line). PyYAML keeps the last of the two silently, so the first would be lost."""
    found: list[tuple[tuple, int, int]] = []
    if isinstance(root, yaml.MappingNode):
        first: dict[str, int] = {}
        for key, value in root.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            line = key.start_mark.line + 1
            if name is not None and name in first:
                found.append((loc + (name,), first[name], line))
            elif name is not None:
                first[name] = line
            found += duplicate_keys(value, loc + ((name,) if name is not None else ()))
    elif isinstance(root, yaml.SequenceNode):
        for i, item in enumerate(root.value):
            found += duplicate_keys(item, loc + (i,))
    return found
