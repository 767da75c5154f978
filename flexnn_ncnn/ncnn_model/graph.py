"""Graph facts of an NCNN network: producers, consumers, the order NCNN runs it in, blob lifetimes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..cli import UserError
from .param import Layer, NcnnParam

if TYPE_CHECKING:
    from .shapes import BlobShape


@dataclass(frozen=True)
class Graph:
    """Layers in NCNN's run order and each blob's lifetime. NCNN runs a layer once its bottoms exist,
    making each missing bottom first, in the layer's bottom order (Net's forward_layer), for each
    output in turn; Input layers come first (their blobs are fed before the run)."""

    order: list[Layer]
    producer: dict[str, int]          # blob -> index in `order` of the layer writing it
    last_use: dict[str, int]          # blob -> index of its last consumer (its producer if none)
    inputs: list[str]                 # tops of Input layers
    outputs: list[str]                # blobs no layer consumes
    written_at: dict[str, int]        # blob -> index in the .param file of the layer writing it

    def readers(self) -> dict[str, list[Layer]]:
        """Each blob some layer reads -> the layers reading it, in run order."""
        found: dict[str, list[Layer]] = {}
        for layer in self.order:
            for b in layer.bottoms:
                found.setdefault(b, []).append(layer)
        return found

    def residuals(self, blobs: list[str], shapes: dict[str, BlobShape]) -> dict[str, Residual | None]:
        """For each of `blobs`, the residual add it flows into: its one reader, a BinaryOp adding another
        blob of its shape (x + f(x)); None when it is read otherwise or is an output, or when an earlier
        one of `blobs` flows into the same add (y = f(x) + g(x): one sum may start from the other), or
        when the other blob is written after it in the file (NCNN reads a .param's blobs in file order,
        and the sum that starts from the other blob is written where the blob was)."""
        readers = self.readers()
        found: dict[str, Residual | None] = {}
        claimed: set[str] = set()
        for blob in blobs:
            reading = readers.get(blob, [])
            add = reading[0] if len(reading) == 1 and blob not in self.outputs else None
            if (add is None or add.name in claimed or add.type != "BinaryOp" or len(add.bottoms) != 2
                    or len(set(add.bottoms)) != 2 or add.params.get_int(0, 0) != 0 or add.params.get_int(1, 0)
                    or blob not in shapes or any(shapes.get(b) != shapes[blob] for b in add.bottoms)):
                found[blob] = None
                continue
            other = next(b for b in add.bottoms if b != blob)
            if self.written_at[other] > self.written_at[blob]:
                found[blob] = None
                continue
            claimed.add(add.name)
            found[blob] = Residual(add, other)
        return found

    @classmethod
    def build(cls, param: NcnnParam) -> Graph:
        producer_of: dict[str, Layer] = {}
        for layer in param:
            for top in layer.tops:
                if top in producer_of:
                    raise UserError(f"blob {top} is produced by both {producer_of[top].name} and {layer.name}")
                producer_of[top] = layer
        for layer in param:
            for b in layer.bottoms:
                if b not in producer_of:
                    raise UserError(f"layer {layer.name}: input blob {b} is produced by no layer")
        if all(layer.type == "Input" for layer in param):
            raise UserError("the model has no layer but its inputs: there is nothing to compute")
        # Kahn's algorithm, always taking the earliest ready layer in file order
        remaining = {id(layer): len(layer.bottoms) for layer in param}
        consumers: dict[str, list[Layer]] = {}
        for layer in param:
            for b in layer.bottoms:
                consumers.setdefault(b, []).append(layer)
        index_in_file = {id(layer): i for i, layer in enumerate(param)}
        ready = sorted((layer for layer in param if not layer.bottoms), key=lambda lyr: index_in_file[id(lyr)])
        order: list[Layer] = []
        while ready:
            layer = ready.pop(0)
            order.append(layer)
            for top in layer.tops:
                for c in consumers.get(top, []):
                    remaining[id(c)] -= 1
                    if remaining[id(c)] == 0:
                        ready.append(c)
            ready.sort(key=lambda lyr: index_in_file[id(lyr)])
        if len(order) != len(param.layers):
            stuck = next(layer.name for layer in param if remaining[id(layer)] > 0)
            raise UserError(f"the network has a cycle (layer {stuck} never becomes ready)")
        # the outputs in that topological order (file order where it already is one), then NCNN's order
        outputs = [top for layer in order for top in layer.tops if top not in consumers]
        order = _run_order(order, producer_of, outputs)
        producer = {top: i for i, layer in enumerate(order) for top in layer.tops}
        last_use = dict(producer)
        for i, layer in enumerate(order):
            for b in layer.bottoms:
                last_use[b] = max(last_use[b], i)
        inputs = [top for layer in order if layer.type == "Input" for top in layer.tops]
        written_at = {top: i for i, layer in enumerate(param) for top in layer.tops}
        return cls(order, producer, last_use, inputs, outputs, written_at)


@dataclass(frozen=True)
class Residual:
    """A BinaryOp `add` of `other` and the blob it was found for, of one shape: a running sum that
    writes that blob can start from `other` instead (other + p0 + p1 + ... writes `add`'s top, and
    `add` goes), so `other` dies at the first partial output instead of outliving the last."""

    add: Layer
    other: str


def _run_order(topological: list[Layer], producer_of: dict[str, Layer], outputs: list[str]) -> list[Layer]:
    """NCNN's run order of an acyclic graph: the Input layers, then, for each output, its producer
    after the producers of its bottoms (depth first, in bottom order). Layers no output needs (no
    tops) run last, in `topological` order: NCNN never runs them."""
    order = [layer for layer in topological if layer.type == "Input"]
    done = {id(layer) for layer in order}
    for blob in outputs:
        stack = [(producer_of[blob], 0)]  # (layer, its next bottom to make)
        while stack:
            layer, k = stack.pop()
            if id(layer) in done:
                continue
            if k < len(layer.bottoms):
                stack.append((layer, k + 1))
                below = producer_of[layer.bottoms[k]]
                if id(below) not in done:
                    stack.append((below, 0))
                continue
            done.add(id(layer))
            order.append(layer)
    return order + [layer for layer in topological if id(layer) not in done]
