"""pnnx exports whose blobs are not images: a 1-D audio net (Convolution1D, its depthwise and
transposed forms, Pooling1D), a 3-D video net (Convolution3D, Pooling3D), a recurrent net (LSTM,
bidirectional, then GRU) and a 2-D net on odd sizes (a transposed conv, bilinear and nearest Interp to
odd sizes, PixelShuffle, grouped conv, GroupNorm, InstanceNorm, HardSwish, a squeeze-excite product).
The slicer leaves the layers it cannot cut whole; each model, as pnnx writes it by default (fp16
weight storage), is sliced generously and at its smallest budget and runs on 20 unseen inputs equal
to stock NCNN within the counted budget (test_unseen_inputs.assert_unseen_inputs_equal_stock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_unseen_inputs import assert_unseen_inputs_equal_stock

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional


class Audio1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv1d(1, 32, 9, stride=2, padding=4), nn.BatchNorm1d(32)
        self.depthwise = nn.Conv1d(32, 32, 5, padding=2, groups=32)
        self.conv2 = nn.Conv1d(32, 96, 3, padding=1)
        self.pool = nn.MaxPool1d(3, 2, 1)
        self.dilated = nn.Conv1d(96, 128, 3, padding=2, dilation=2)
        self.up = nn.ConvTranspose1d(128, 64, 4, stride=2, padding=1)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(self.depthwise(x))))
        return self.fc(self.up(F.relu(self.dilated(x))).mean(2))


class Video3d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv3d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv3d(16, 32, 3, stride=(1, 2, 2), padding=1)
        self.pool = nn.MaxPool3d(2)
        self.conv3 = nn.Conv3d(32, 64, (1, 3, 3), padding=(0, 1, 1))
        self.fc = nn.Linear(64, 7)

    def forward(self, x):
        x = self.pool(F.relu(self.conv2(F.relu(self.conv1(x)))))
        return self.fc(F.relu(self.conv3(x)).mean((2, 3, 4)))


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(40, 128)
        self.lstm = nn.LSTM(128, 256, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(512, 128, batch_first=True)
        self.out = nn.Linear(128, 30)

    def forward(self, x):
        x, _ = self.lstm(F.relu(self.embed(x)))
        x, _ = self.gru(x)
        return self.out(x)


class OddSizes2d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc1 = nn.Conv2d(3, 24, 3, padding=1)
        self.norm1 = nn.GroupNorm(4, 24)
        self.enc2 = nn.Conv2d(24, 48, 3, stride=2, padding=1)
        self.enc3 = nn.Conv2d(48, 96, 5, stride=2, padding=2, groups=3)
        self.norm3 = nn.InstanceNorm2d(96, affine=True)
        self.squeeze, self.excite = nn.Conv2d(96, 8, 1), nn.Conv2d(8, 96, 1)
        self.up = nn.ConvTranspose2d(96, 48, 3, stride=2, padding=1)
        self.merge = nn.Conv2d(96, 48, 3, padding=1)
        self.shuffle = nn.Conv2d(48, 24 * 4, 1)
        self.head = nn.Conv2d(48, 2, 3, padding=1)

    def forward(self, x):
        a = F.hardswish(self.norm1(self.enc1(x)))
        b = F.relu(self.enc2(a))
        c = F.relu(self.norm3(self.enc3(b)))
        c = c * torch.sigmoid(self.excite(F.relu(self.squeeze(c.mean((2, 3), keepdim=True)))))
        u = F.interpolate(self.up(c), size=b.shape[2:], mode="bilinear", align_corners=False)
        m = F.relu(self.merge(torch.cat([u, b], 1)))
        p = F.interpolate(F.pixel_shuffle(self.shuffle(m), 2), size=a.shape[2:], mode="nearest")
        return self.head(torch.cat([p, a], 1))


MODELS = {  # name -> (module, torch input shape)
    "audio1d": (Audio1d, (1, 1, 8001)),
    "video3d": (Video3d, (1, 3, 8, 57, 43)),
    "recurrent": (Recurrent, (1, 37, 40)),
    "odd_sizes_2d": (OddSizes2d, (1, 3, 99, 131)),
}


@pytest.mark.parametrize("name", MODELS)
def test_pnnx_export_sliced_equals_stock_on_unseen_inputs(name: str, tmp_path: Path) -> None:
    from flexnn_ncnn.zoo import export_ncnn
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make()
    for module in model.modules():  # statistics a trained net has, not the identity
        if isinstance(module, nn.BatchNorm1d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    param, bin_ = export_ncnn(model, shape, tmp_path / "model", name)
    assert_unseen_inputs_equal_stock(param, bin_, shape, tmp_path)
