"""`aiperf graph ...`: inspect the architectures the search finds."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

import typer

from aiperf import units
from aiperf.flops import count_flops
from aiperf.graph import Graph, GraphError
from aiperf.layers import KINDS
from aiperf_cli.options import fail, require_command
from aiperf_cli.values import (
    CLASSES,
    GRAPH_CHANNELS,
    INPUT_SIZE,
    LAYERS,
    MORPH_STEPS,
    PARAMS,
    SEED,
    WIDTH,
    KernelSize,
    float_option,
    int_option,
)

graph_app = typer.Typer(help="Build, inspect, count and morph architecture graphs.")
graph_app.callback(invoke_without_command=True)(require_command)


def register(app: typer.Typer) -> None:
    app.add_typer(graph_app, name="graph")


def read_graph(source: str) -> Graph:
    """Load a graph from a file path or '-' (stdin); bad input -> one-line error, exit 2."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"no such file: {source}")
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        fail(f"cannot read {source}: {exc}")
    try:
        return Graph.from_json(text)
    except GraphError as exc:
        fail(f"{'stdin' if source == '-' else source}: {exc}")


@graph_app.command("resnet50")
def resnet50_cmd(
    input_size: int = int_option(224, "--input-size", span=INPUT_SIZE, help="Input height and width."),
    channels: int = int_option(3, "--channels", span=GRAPH_CHANNELS, help="Input channels."),
    classes: int = int_option(1000, "--classes", span=CLASSES, help="Number of classes."),
    width: float = float_option(1.0, "--width", span=WIDTH, exclusive_low=True,
                                help="Width multiplier for every conv."),
) -> None:
    """Print ResNet-50 v1 (Keras layout) as canonical JSON."""
    from aiperf.resnet import resnet50

    try:
        graph = resnet50(input_size=input_size, channels=channels, classes=classes, width=width)
    except (ValueError, GraphError) as exc:
        fail(str(exc))
    print(graph.to_json())


@graph_app.command("show")
def show_cmd(source: str = typer.Argument(..., metavar="FILE|-")) -> None:
    """Print a readable summary: layers by type, depth, parameters, FLOPs per image."""
    graph = read_graph(source)
    fc = count_flops(graph)
    types = Counter(layer.type for layer in graph.layers)
    h, w, c = graph.input_shape
    print(f"name:        {graph.meta.get('name', '-')}")
    print(f"hash:        {graph.hash()}")
    if graph.meta.get("parent"):
        print(f"parent:      {graph.meta['parent']}")
    for op in graph.meta.get("operations", []):
        print(f"  operation: {op}")
    print(f"input:       {h}x{w}x{c}, {graph.num_classes} classes")
    print(f"layers:      {len(graph.layers)} ({', '.join(f'{t} {n}' for t, n in sorted(types.items()))})")
    print(f"depth:       {graph.depth()} weighted layers")
    print(f"parameters:  {graph.num_params():,}")
    op = units.operations
    print(f"per image:   forward {op(fc.forward['total'])}, backward {op(fc.backward['total'])}, "
          f"train {op(fc.train)}, eval {op(fc.eval)}")


@graph_app.command("flops")
def flops_cmd(
    source: str = typer.Argument(..., metavar="FILE|-"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Print FLOP counts per image (SPEC section 6)."""
    graph = read_graph(source)
    fc = count_flops(graph)
    if as_json:
        print(json.dumps({"params": graph.num_params(), "per_image": fc.to_dict()}))
        return
    op = units.operations  # one way to write a number: "7.81 GFLOP", as every table writes it
    print(f"{'kind':<10} {'forward':>12} {'backward':>12}")
    for kind in (*KINDS, "total"):
        print(f"{kind:<10} {op(fc.forward[kind]):>12} {op(fc.backward[kind]):>12}")
    print(f"train (forward+backward) per image: {op(fc.train)}")
    print(f"eval (forward) per image:           {op(fc.eval)}")
    print(f"parameters: {graph.num_params():,}")


@graph_app.command("morph")
def morph_cmd(
    source: str = typer.Argument(..., metavar="FILE|-"),
    seed: int = int_option(..., "--seed", span=SEED, help="Random seed: the same arguments give the same child."),
    steps: int = int_option(1, "--steps", span=MORPH_STEPS, help="Number of random morphism operations."),
    kernel: KernelSize = typer.Option("3", "--kernel-size", help="Kernel size of inserted convolutions."),
    max_layers: Optional[int] = int_option(None, "--max-layers", span=LAYERS, help="Refuse children with more "
                                           "layers."),
    max_params: Optional[int] = int_option(None, "--max-params", span=PARAMS, help="Refuse children with more "
                                           "parameters."),
) -> None:
    """Print the child after STEPS random morphism operations."""
    from aiperf.morphism import Limits, MorphismError, random_morph

    kernel_size = int(kernel.value)
    graph = read_graph(source)
    defaults = Limits()
    limits = Limits(max_layers=max_layers or defaults.max_layers,
                    max_params=max_params or defaults.max_params, kernel_size=kernel_size)
    try:
        child = random_morph(graph, seed=seed, steps=steps, kernel_size=kernel_size, limits=limits)
    except (MorphismError, GraphError) as exc:
        fail(str(exc))
    print(child.to_json())
