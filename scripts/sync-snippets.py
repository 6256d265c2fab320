#!/usr/bin/env python3
"""Rewrite every doc snippet (`<!-- snippet: PATH#ANCHOR -->` + fenced block) from its
ANCHOR region, as crates/durable-mcp/tests/snippets.rs checks them. Run after editing an
example."""
import pathlib, re, sys

root = pathlib.Path(__file__).resolve().parent.parent

def region(path, anchor):
    lines = (root / path).read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip() == f"// ANCHOR: {anchor}")
    end = next(i for i, l in enumerate(lines) if l.strip() == f"// ANCHOR_END: {anchor}")
    body = lines[start + 1:end]
    indent = min((len(l) - len(l.lstrip()) for l in body if l.strip()), default=0)
    return [l[indent:].rstrip() for l in body]

changed = 0
for md in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
    lines = md.read_text().splitlines(keepends=False)
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = re.match(r"<!-- snippet: (\S+)#(\S+) -->", line.strip())
        if m:
            fence = lines[i + 1]
            out.append(fence)
            j = i + 2
            while lines[j].strip() != "```":
                j += 1
            out.extend(region(m.group(1), m.group(2)))
            i = j
            continue
        i += 1
    text = "\n".join(out) + "\n"
    if text != md.read_text():
        md.write_text(text)
        changed += 1
        print(f"updated {md.relative_to(root)}")
sys.exit(0)
