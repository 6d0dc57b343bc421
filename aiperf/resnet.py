"""ResNet-50 v1 in the Keras layout (stride on the first 1×1 conv of a block).

The official graph (224, 3 channels, 1000 classes, width 1.0) has the same
parameter count as ``keras.applications.ResNet50(weights=None)``: 25,636,712.
Keras pads explicitly before the 7×7 stem conv and the max pool and then uses
'valid'; 'same' padding gives the same output shapes, parameters and FLOPs.
"""

from __future__ import annotations

from aiperf.graph import INPUT, Graph, Layer, conv, dense, maxpool, simple

# (filters of the 1×1 bottleneck convs, blocks, stride of the first block)
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))


def resnet50(input_size: int = 224, channels: int = 3, classes: int = 1000,
             width: float = 1.0) -> Graph:
    """Build ResNet-50 v1. `width` multiplies every conv's filter count."""
    if not isinstance(input_size, int) or input_size < 32:
        raise ValueError(f"input_size must be an integer >= 32, got {input_size!r}")
    if not isinstance(channels, int) or channels <= 0:
        raise ValueError(f"channels must be a positive integer, got {channels!r}")
    if not isinstance(classes, int) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2, got {classes!r}")
    if not width > 0:
        raise ValueError(f"width must be positive, got {width!r}")

    def w(filters: int) -> int:
        return max(1, int(round(filters * width)))

    layers: list[Layer] = [
        conv("conv1_conv", INPUT, w(64), 7, 2),
        simple("conv1_bn", "batchnorm", "conv1_conv"),
        simple("conv1_relu", "relu", "conv1_bn"),
        maxpool("pool1_pool", "conv1_relu", 3, 2),
    ]
    x = "pool1_pool"
    for s, (filters, blocks, stride) in enumerate(STAGES, start=2):
        for b in range(1, blocks + 1):
            p = f"conv{s}_block{b}"
            st = stride if b == 1 else 1
            if b == 1:
                layers += [conv(f"{p}_0_conv", x, w(4 * filters), 1, st),
                           simple(f"{p}_0_bn", "batchnorm", f"{p}_0_conv")]
                shortcut = f"{p}_0_bn"
            else:
                shortcut = x
            layers += [
                conv(f"{p}_1_conv", x, w(filters), 1, st),
                simple(f"{p}_1_bn", "batchnorm", f"{p}_1_conv"),
                simple(f"{p}_1_relu", "relu", f"{p}_1_bn"),
                conv(f"{p}_2_conv", f"{p}_1_relu", w(filters), 3, 1),
                simple(f"{p}_2_bn", "batchnorm", f"{p}_2_conv"),
                simple(f"{p}_2_relu", "relu", f"{p}_2_bn"),
                conv(f"{p}_3_conv", f"{p}_2_relu", w(4 * filters), 1, 1),
                simple(f"{p}_3_bn", "batchnorm", f"{p}_3_conv"),
                simple(f"{p}_add", "add", shortcut, f"{p}_3_bn"),
                simple(f"{p}_out", "relu", f"{p}_add"),
            ]
            x = f"{p}_out"
    layers += [
        simple("avg_pool", "avgpool", x),
        dense("predictions_dense", "avg_pool", classes),
        simple("predictions", "softmax", "predictions_dense"),
    ]
    name = "resnet50" if width == 1.0 else f"resnet50-w{width:g}"
    return Graph((input_size, input_size, channels), classes, tuple(layers),
                 {"name": name, "parent": None, "operations": []})
