"""Built-in models: small, code-defined PyTorch networks with seeded weights.

Each model has size options with small defaults, so that building, exporting and importing
one takes seconds. A model is named by a reference such as ``zoo:bert?layers=4&seq=128``.

>>> [e.name for e in list_models()]
['mlp', 'resnet', 'bert', 'gpt', 'inception']
>>> parse_zoo_ref("zoo:bert?layers=4&seq=128")
('bert', {'layers': 4, 'seq': 128})
>>> module, inputs = build("mlp", layers=2, hidden=16)
>>> tuple(inputs[0].shape)
(1, 64)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from placewise.errors import InputError
from placewise.graph.torch_import import import_module
from placewise.io import atomic_writer
from placewise.units import format_bytes

if TYPE_CHECKING:
    import torch
    from torch import nn

    from placewise.graph.ir import Graph

__all__ = [
    "ZOO_MAX_BYTES",
    "ZooEntry",
    "build",
    "export_onnx",
    "export_pt2",
    "implied_bytes",
    "list_models",
    "load_zoo",
    "parse_zoo_ref",
    "resolve_options",
]

_SEED = 0


@dataclass(frozen=True, slots=True)
class ZooEntry:
    """One built-in model: its name, a one-line description and its default options."""

    name: str
    description: str
    default_options: Mapping[str, int] = field(hash=False)
    inputs_desc: str  # what the example inputs are, e.g. "ids int64 [batch, seq]"


# ---- model definitions (torch imported lazily, inside builders) -----------------------------


def _mlp(o: Mapping[str, int]) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import torch
    from torch import nn

    layers: list[nn.Module] = []
    width = o["in_features"]
    for _ in range(o["layers"]):
        layers += [nn.Linear(width, o["hidden"]), nn.ReLU()]
        width = o["hidden"]
    layers.append(nn.Linear(width, o["out_features"]))
    model = nn.Sequential(*layers)
    return model, (torch.randn(o["batch"], o["in_features"]),)


def _resnet(o: Mapping[str, int]) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down: nn.Module | None = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            skip = x if self.down is None else self.down(x)
            return self.relu(y + skip)

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w = o["width"]
            self.stem = nn.Sequential(nn.Conv2d(3, w, 3, stride=1, padding=1, bias=False),
                                      nn.BatchNorm2d(w), nn.ReLU(),
                                      nn.MaxPool2d(3, stride=2, padding=1))
            blocks: list[nn.Module] = []
            cin = w
            for i in range(o["blocks"]):
                # double the width and halve the resolution every second block
                cout = w * 2 ** (i // 2)
                stride = 2 if (i > 0 and i % 2 == 0) else 1
                blocks.append(Block(cin, cout, stride))
                cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, o["classes"])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.pool(self.blocks(self.stem(x)))
            return self.fc(torch.flatten(y, 1))

    return ResNet(), (torch.randn(o["batch"], 3, o["image"], o["image"]),)


def _attention(x: torch.Tensor, qkv: nn.Module, proj: nn.Module, heads: int,
               causal: bool) -> torch.Tensor:
    import torch.nn.functional as F

    b, s, h = x.shape
    q, k, v = qkv(x).split(h, dim=-1)
    q = q.view(b, s, heads, h // heads).transpose(1, 2)
    k = k.view(b, s, heads, h // heads).transpose(1, 2)
    v = v.view(b, s, heads, h // heads).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return proj(y.transpose(1, 2).reshape(b, s, h))


def _check_heads(o: Mapping[str, int]) -> None:
    if o["hidden"] % o["heads"]:
        raise InputError(f"hidden={o['hidden']} is not a multiple of heads={o['heads']}",
                         place="zoo options")


def _bert(o: Mapping[str, int]) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    _check_heads(o)
    hidden, heads = o["hidden"], o["heads"]

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.out = nn.Linear(hidden, hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _attention(x, self.qkv, self.out, heads, causal=False)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = Attention()
            self.ln1 = nn.LayerNorm(hidden)
            self.fc1 = nn.Linear(hidden, 4 * hidden)
            self.fc2 = nn.Linear(4 * hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.ln1(x + self.attn(x))
            return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(o["vocab"], hidden)
            self.ln = nn.LayerNorm(hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(o["layers"]))
            self.pooler = nn.Linear(hidden, hidden)
            # drawn last: the other weights do not depend on the sequence length
            self.pos = nn.Parameter(torch.randn(o["seq"], hidden) * 0.02)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.ln(self.tok(ids) + self.pos)
            for layer in self.layers:
                x = layer(x)
            return torch.tanh(self.pooler(x[:, 0]))

    model = Bert()  # before the inputs: the weights do not depend on the batch
    ids = torch.randint(0, o["vocab"], (o["batch"], o["seq"]), dtype=torch.int64)
    return model, (ids,)


def _gpt(o: Mapping[str, int]) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    _check_heads(o)
    hidden, heads = o["hidden"], o["heads"]

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
            self.out = nn.Linear(hidden, hidden, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _attention(x, self.qkv, self.out, heads, causal=True)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Linear(hidden, 4 * hidden, bias=False)
            self.up = nn.Linear(hidden, 4 * hidden, bias=False)
            self.down = nn.Linear(4 * hidden, hidden, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down(F.silu(self.gate(x)) * self.up(x))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.RMSNorm(hidden, eps=1e-6)
            self.attn = Attention()
            self.norm2 = nn.RMSNorm(hidden, eps=1e-6)
            self.mlp = MLP()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(o["vocab"], hidden)
            self.layers = nn.ModuleList(Block() for _ in range(o["layers"]))
            self.norm = nn.RMSNorm(hidden, eps=1e-6)
            self.head = nn.Linear(hidden, o["vocab"], bias=False)
            # drawn last: the other weights do not depend on the sequence length
            self.pos = nn.Parameter(torch.randn(o["seq"], hidden) * 0.02)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.tok(ids) + self.pos
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x))

    model = GPT()  # before the inputs: the weights do not depend on the batch
    ids = torch.randint(0, o["vocab"], (o["batch"], o["seq"]), dtype=torch.int64)
    return model, (ids,)


def _inception(o: Mapping[str, int]) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import torch
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU())

    class Mixed(nn.Module):
        """Four parallel branches (1x1; 1x1->3x3; 1x1->5x5; pool->1x1), concatenated."""

        def __init__(self, cin: int, b: int):
            super().__init__()
            self.branch1 = conv_bn(cin, b, 1)
            self.branch3 = nn.Sequential(conv_bn(cin, b, 1), conv_bn(b, b, 3))
            self.branch5 = nn.Sequential(conv_bn(cin, b // 2, 1), conv_bn(b // 2, b, 5))
            self.branch_pool = nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1),
                                             conv_bn(cin, b, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([self.branch1(x), self.branch3(x), self.branch5(x),
                              self.branch_pool(x)], dim=1)

    class Inception(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w = o["width"]
            self.stem = nn.Sequential(conv_bn(3, w, 3), nn.MaxPool2d(2))
            mods: list[nn.Module] = []
            cin = w
            for i in range(o["blocks"]):
                b = w * 2 ** (i // 2)
                mods.append(Mixed(cin, b))
                cin = 4 * b
                if i % 2 == 1 and i + 1 < o["blocks"]:
                    mods.append(nn.MaxPool2d(2))
            self.blocks = nn.Sequential(*mods)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, o["classes"])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.pool(self.blocks(self.stem(x)))
            return self.fc(torch.flatten(y, 1))

    if o["width"] < 2:
        raise InputError(f"width={o['width']} must be at least 2", place="zoo options")
    return Inception(), (torch.randn(o["batch"], 3, o["image"], o["image"]),)


_Builder = Callable[[Mapping[str, int]], "tuple[nn.Module, tuple[torch.Tensor, ...]]"]


@dataclass(frozen=True, slots=True)
class _Model:
    entry: ZooEntry
    builder: _Builder


def _model(name: str, description: str, inputs_desc: str, builder: _Builder,
           **defaults: int) -> _Model:
    return _Model(ZooEntry(name, description, MappingProxyType(dict(defaults)), inputs_desc),
                  builder)


_REGISTRY: dict[str, _Model] = {m.entry.name: m for m in (
    _model("mlp", "multi-layer perceptron: Linear+ReLU stack", "x fp32 [batch, in_features]",
           _mlp, layers=3, hidden=256, in_features=64, out_features=10, batch=1),
    _model("resnet", "ResNet-style CNN: conv+BN+ReLU basic blocks with skip connections",
           "image fp32 [batch, 3, image, image]",
           _resnet, blocks=4, width=16, image=32, classes=10, batch=1),
    _model("bert", "BERT-style encoder: embedding, SDPA self-attention, LayerNorm, GELU FFN",
           "ids int64 [batch, seq]",
           _bert, layers=2, hidden=128, heads=4, seq=64, vocab=1000, batch=1),
    _model("gpt", "GPT-style decoder prefill: causal SDPA, RMSNorm, SwiGLU MLP, LM head",
           "ids int64 [batch, seq]",
           _gpt, layers=2, hidden=128, heads=4, seq=64, vocab=1000, batch=1),
    _model("inception", "Inception-style CNN: parallel 1x1/3x3/5x5/pool branches, concat",
           "image fp32 [batch, 3, image, image]",
           _inception, blocks=2, width=16, image=32, classes=10, batch=1),
)}

# limits that keep a mistyped option from asking for a model that cannot be built
_MAX_OPTION = 1 << 20


def list_models() -> list[ZooEntry]:
    """The built-in models, in a stable order."""
    return [m.entry for m in _REGISTRY.values()]


def _entry(name: str) -> _Model:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(_REGISTRY)
        raise InputError(f"unknown zoo model {name!r} (known: {known})",
                         place=f"zoo:{name}") from None


def resolve_options(name: str, options: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The defaults of model ``name`` overridden by ``options``, checked.

    Values may be ints or decimal strings; each must be a positive integer, and together
    they must not imply more than ``ZOO_MAX_BYTES`` of parameters and activations (see
    ``implied_bytes``).

    >>> resolve_options("mlp", {"layers": "2"})["layers"]
    2
    >>> resolve_options("mlp", {"hidden": 1 << 20, "layers": 1000})
    Traceback (most recent call last):
    ...
    placewise.errors.InputError: zoo:mlp: options hidden=1048576, layers=1000 imply at least 4.00 TiB of parameters and activations (fp32), more than the 16.00 GiB a zoo model may take
    """
    model = _entry(name)
    out = dict(model.entry.default_options)
    for key, value in (options or {}).items():
        if key not in out:
            raise InputError(f"unknown option {key!r} for zoo model {name!r} "
                             f"(options: {', '.join(out)})", place=f"zoo:{name}")
        out[key] = _positive_int(name, key, value)
    params, acts = implied_bytes(name, out, stop_at=ZOO_MAX_BYTES)
    if params + acts > ZOO_MAX_BYTES:
        given = [k for k in (options or {}) if out[k] != model.entry.default_options[k]]
        shown = ", ".join(f"{k}={out[k]}" for k in (given or out))
        word = "option" if len(given) == 1 else "options"
        verb = "implies" if len(given) == 1 else "imply"
        raise InputError(f"{word} {shown} {verb} at least {format_bytes(params + acts)} of "
                         f"parameters and activations (fp32), more than the "
                         f"{format_bytes(ZOO_MAX_BYTES)} a zoo model may take",
                         place=f"zoo:{name}")
    return out


#: the most memory (parameters + activations, fp32) a zoo model's options may imply
ZOO_MAX_BYTES = 16 << 30


def implied_bytes(name: str, o: Mapping[str, int], *, stop_at: int | None = None
                  ) -> tuple[int, int]:
    """(parameter bytes, activation bytes) that building and tracing zoo model ``name``
    with options ``o`` takes at fp32: every weight, plus every intermediate tensor of one
    forward pass (attention scores included). An estimate from the architecture (the
    weights within a few percent of what torch allocates); with ``stop_at`` the count may
    stop early once the total passes it, so absurd options cost no time.

    >>> implied_bytes("mlp", {"layers": 1, "hidden": 4, "in_features": 2, "out_features": 1,
    ...                       "batch": 1})
    (68, 44)
    """
    limit = stop_at if stop_at is not None else 1 << 200
    f = 4  # bytes per fp32 element
    p = a = 0
    b = o["batch"]
    if name == "mlp":
        width = o["in_features"]
        a += b * width
        for _ in range(o["layers"]):
            p += width * o["hidden"] + o["hidden"]
            a += 2 * b * o["hidden"]  # linear, relu
            width = o["hidden"]
            if (p + a) * f > limit:
                break
        p += width * o["out_features"] + o["out_features"]
        a += b * o["out_features"]
    elif name in ("resnet", "inception"):
        w, res = o["width"], o["image"]
        p += 3 * w * 9 + 4 * w
        a += b * 3 * res * res + 3 * b * w * res * res  # input, conv, bn, relu
        res = -(-res // 2)
        a += b * w * res * res  # max pool
        cin = w
        for i in range(o["blocks"]):
            if name == "resnet":
                cout = w * 2 ** (i // 2)
                stride = 2 if (i > 0 and i % 2 == 0) else 1
                res = -(-res // stride)
                p += 9 * cin * cout + 9 * cout * cout + 8 * cout
                if stride != 1 or cin != cout:
                    p += cin * cout + 4 * cout
                a += 8 * b * cout * res * res
                cin = cout
            else:
                c = w * 2 ** (i // 2)
                h = c // 2
                p += 3 * cin * c + cin * h + 9 * c * c + 25 * h * c + 20 * c + 8 * h
                a += b * res * res * (cin + 12 * c + 3 * h + 4 * c)
                cin = 4 * c
                if i % 2 == 1 and i + 1 < o["blocks"]:
                    res = max(1, res // 2)
                    a += b * cin * res * res
            if (p + a) * f > limit:
                break
        p += cin * o["classes"] + o["classes"]
        a += b * (cin + o["classes"])
    elif name in ("bert", "gpt"):
        h, s, v, heads = o["hidden"], o["seq"], o["vocab"], o["heads"]
        p += v * h + s * h + (h * h + h if name == "bert" else h * v + h)
        a += b * s * (2 + 3 * h)
        for _ in range(o["layers"]):
            p += 12 * h * h + 13 * h if name == "bert" else 16 * h * h + 2 * h
            a += b * s * h * 24 + 2 * b * heads * s * s  # projections, FFN, scores
            if (p + a) * f > limit:
                break
        a += b * s * v if name == "gpt" else b * h
    return p * f, a * f


def _positive_int(name: str, key: str, value: Any) -> int:
    if isinstance(value, bool):
        ok = False
    elif isinstance(value, int):
        ok, n = True, value
    elif isinstance(value, str) and value.strip().isdigit():
        ok, n = True, int(value.strip())
    else:
        ok = False
    if not ok or not 0 < n <= _MAX_OPTION:
        raise InputError(f"option {key}={value!r} must be a positive integer "
                         f"no larger than {_MAX_OPTION}", place=f"zoo:{name}")
    return n


def parse_zoo_ref(ref: str) -> tuple[str, dict[str, int]]:
    """Split ``zoo:NAME?k=v&k=v`` into the model name and its (checked) explicit options.

    >>> parse_zoo_ref("zoo:gpt")
    ('gpt', {})
    """
    text = ref.strip()
    if not text.startswith("zoo:"):
        raise InputError(f"{ref!r} is not a zoo reference (expected zoo:NAME?opt=value)",
                         place="model reference")
    body = text[len("zoo:"):]
    name, _, query = body.partition("?")
    name = name.strip()
    _entry(name)
    options: dict[str, int] = {}
    if query:
        for part in query.split("&"):
            if not part:
                continue
            if "=" not in part:
                raise InputError(f"option {part!r} has no value (expected key=value)",
                                 place=f"zoo:{name}")
            pairs = parse_qsl(part, keep_blank_values=True, strict_parsing=False)
            key, value = pairs[0] if pairs else (part, "")
            if key in options:
                raise InputError(f"option {key!r} given twice", place=f"zoo:{name}")
            options[key] = value  # type: ignore[assignment]
    checked = resolve_options(name, options)
    return name, {k: checked[k] for k in options}


@contextlib.contextmanager
def _seeded() -> Iterator[None]:
    """Seed torch for a build without disturbing the caller's random state."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        yield


def build(name: str, **options: Any) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Build model ``name`` in eval mode with seeded weights; return it and example inputs.

    The same name and options always give the same weights and inputs.
    """
    model = _entry(name)
    opts = resolve_options(name, options)
    with _seeded():
        module, inputs = model.builder(opts)
    with _seeded():  # seeded again: norm weights depend on neither the inputs nor seq
        _vary_norm_weights(module)
    module.eval()
    return module, inputs


def _vary_norm_weights(module: nn.Module) -> None:
    """Give norm layers the non-trivial weights and statistics of a trained model.

    Freshly built norms hold identical all-ones / all-zeros tensors, which exporters merge
    into one initializer and fold away; trained models never look like that.
    """
    import torch
    from torch import nn

    norms = (nn.LayerNorm, nn.RMSNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm)
    with torch.no_grad():
        for m in module.modules():
            if not isinstance(m, norms):
                continue
            for attr, mean, std in (("weight", 1.0, 0.02), ("bias", 0.0, 0.02),
                                    ("running_mean", 0.0, 0.1)):
                t = getattr(m, attr, None)
                if isinstance(t, torch.Tensor):
                    t.normal_(mean, std)
            var = getattr(m, "running_var", None)
            if isinstance(var, torch.Tensor):
                var.uniform_(0.5, 1.5)


def _dynamic_batch(inputs: tuple[torch.Tensor, ...]
                   ) -> tuple[tuple[torch.Tensor, ...], tuple[dict[int, Any], ...]]:
    """Example inputs fit for tracing a symbolic batch, and the dynamic-shape spec.

    torch.export specializes a size-1 dim to the constant 1, so a batch of 1 is traced
    with the example repeated twice; the exported batch dim is the symbol ``batch``.
    """
    import torch
    from torch.export import Dim

    batch = Dim("batch", min=1, max=_MAX_OPTION)
    traced = tuple(torch.cat([x, x]) if x.shape[0] == 1 else x for x in inputs)
    return traced, tuple({0: batch} for _ in inputs)


def _atomic_write(path: str | os.PathLike[str], write: Callable[[str], None]) -> Path:
    """Call ``write(tmp)`` for a temp file beside ``path`` and rename it into place.

    The output boundary (``placewise.io.atomic_writer``): ``path`` must be new or a regular
    file. The temp file has the destination's own name inside a fresh hidden folder (a .pt2
    archive takes its inner folder name from the file name), so no partial file is ever
    visible at ``path``.
    """
    return atomic_writer(path, lambda tmp: write(str(tmp)), keep_name=True)


def _export_program(name: str, options: Mapping[str, Any] | None, *,
                    dynamic_batch: bool) -> Any:
    import torch

    module, inputs = build(name, **dict(options or {}))
    shapes = None
    if dynamic_batch:
        inputs, shapes = _dynamic_batch(inputs)
    with torch.no_grad():
        return torch.export.export(module, inputs, dynamic_shapes=shapes, strict=False)


def export_onnx(name: str, options: Mapping[str, Any] | None,
                path: str | os.PathLike[str], *, dynamic_batch: bool = True) -> Path:
    """Export zoo model ``name`` to an ONNX file at ``path`` (opset 18, weights inline).

    With ``dynamic_batch`` the first dim of every input (and what follows from it) is the
    symbol ``batch``. The file appears only when the export succeeded.
    """
    import torch

    module, inputs = build(name, **dict(options or {}))
    shapes = None
    if dynamic_batch:
        inputs, shapes = _dynamic_batch(inputs)

    def write(tmp: str) -> None:
        with torch.no_grad(), _quiet():
            prog = torch.onnx.export(module, inputs, dynamo=True, dynamic_shapes=shapes,
                                     opset_version=18, external_data=False, verbose=False,
                                     optimize=True)
            if prog is None:  # pragma: no cover - only the legacy exporter returns None
                raise RuntimeError("torch.onnx.export returned no program")
            prog.save(tmp, external_data=False)

    return _atomic_write(path, write)


def export_pt2(name: str, options: Mapping[str, Any] | None,
               path: str | os.PathLike[str], *, dynamic_batch: bool = True) -> Path:
    """Export zoo model ``name`` with ``torch.export`` and save it to ``path`` (.pt2)."""
    import torch

    ep = _export_program(name, options, dynamic_batch=dynamic_batch)
    return _atomic_write(path, lambda tmp: torch.export.save(ep, tmp))


def load_zoo(ref: str, *, batch: int | None = None) -> Graph:
    """Build the zoo model named by ``ref`` and import it (concrete shapes).

    ``batch`` overrides the reference's batch option.
    """
    name, options = parse_zoo_ref(ref)
    if batch is not None:
        options["batch"] = _positive_int(name, "batch", batch)
    module, inputs = build(name, **options)
    graph_name = name if not options else name + "?" + "&".join(
        f"{k}={v}" for k, v in sorted(options.items()))
    return import_module(module, inputs, name=graph_name)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the ONNX exporter's progress prints and warnings (library code never prints)."""
    import io
    import logging
    import warnings

    sink = io.StringIO()
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), \
                contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels, strict=True):
            lg.setLevel(lv)
