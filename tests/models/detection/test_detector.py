"""The YOLO-style detector: shapes at every placement, the errors, the DFL expectation and loss
against hand values, the task-aligned assigner on a hand case, FLOPs and parameters of the MHSA,
and that the loss drives one batch towards its boxes."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.experiments.detection.measure import activation_mb, forward_flops
from attnkit.models.detection import (DFL, PLACEMENTS, DetectionLoss, MHSAPlacement, TaskAlignedAssigner, YOLODetector,
                                      dfl_loss, make_anchors)
from attnkit.modules.mhsa2d import MHSA2d

WIDTHS = (4, 8, 16, 16, 32)


def _det(name="plain", **kw):
    return YOLODetector(3, 1, WIDTHS, 1, reg_max=8, attention=MHSAPlacement.named(name), image_size=64, **kw)


@pytest.mark.parametrize("name", list(PLACEMENTS))
def test_shapes_at_every_placement(name):
    m = _det(name)
    box, cls, shapes = m(torch.randn(2, 1, 64, 96))
    A = 8 * 12 + 4 * 6 + 2 * 3
    assert box.shape == (2, A, 4 * 8) and cls.shape == (2, A, 3) and shapes == [(8, 12), (4, 6), (2, 3)]
    assert sum(isinstance(x, MHSA2d) for x in m.modules()) == len(PLACEMENTS[name])
    m.eval()
    out = m.predict(torch.rand(2, 1, 64, 64), max_det=7)
    assert len(out) == 2 and all(o.shape[1] == 6 and len(o) <= 7 for o in out)


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="multiples of 32"):
        _det()(torch.zeros(1, 1, 60, 64))
    with pytest.raises(ValueError, match="valid sites"):
        MHSAPlacement(("p3",))
    with pytest.raises(TypeError, match="tuple"):
        MHSAPlacement("p5")
    with pytest.raises(ValueError, match="valid names"):
        MHSAPlacement.named("mhsa_p3")
    with pytest.raises(ValueError, match="num_heads"):
        YOLODetector(3, 1, (4, 8, 16, 16, 30), attention=MHSAPlacement(("p5",), 4))
    with pytest.raises(TypeError, match="MHSAPlacement"):
        YOLODetector(3, 1, WIDTHS, attention="p5")


def test_dfl_is_the_expectation_over_bins():
    logits = torch.randn(2, 4 * 8, 5)
    p = logits.view(2, 4, 8, 5).softmax(2)
    torch.testing.assert_close(DFL(8)(logits), (p * torch.arange(8.0)[None, None, :, None]).sum(2))


def test_dfl_loss_is_minimal_with_the_mass_split_between_the_two_bins():
    y = torch.tensor([[3.3, 0.4, 6.5, 1.25]], dtype=torch.float64)
    probs = torch.full((1, 4, 8), 1e-12, dtype=torch.float64)
    for s, v in enumerate(y[0].tolist()):
        lo = int(v)
        probs[0, s, lo], probs[0, s, lo + 1] = lo + 1 - v, v - lo
    logits = probs.log().requires_grad_()
    loss = dfl_loss(logits, y)
    ent = [-(a * math.log(a) + b * math.log(b)) for a, b in ((0.7, 0.3), (0.6, 0.4), (0.5, 0.5), (0.75, 0.25))]
    assert float(loss.detach()) == pytest.approx(sum(ent) / 4, abs=1e-9)  # the entropy of the split
    loss.sum().backward()
    assert logits.grad.abs().max() < 1e-9  # a minimum: the split (y_r − y, y − y_l) is the optimum
    assert torch.autograd.gradcheck(lambda z: dfl_loss(z, y), (torch.randn(1, 4, 8, dtype=torch.float64, requires_grad=True),))


def test_assigner_gives_each_object_its_best_aligned_anchors_inside_it():
    points, stride = make_anchors([(4, 4)], [8])
    points = points * stride  # cell centres 4, 12, 20, 28 px
    gt = torch.tensor([[[0.0, 0, 16, 16], [16, 16, 32, 32]]])  # two objects, four centres inside each
    labels = torch.tensor([[0.0, 1]])
    scores = torch.full((1, 16, 2), 0.5)
    pred = torch.cat((points - 8, points + 8), 1)[None]  # every anchor predicts a 16×16 box around itself
    assigner = TaskAlignedAssigner(topk=2)
    boxes, tscores, fg = assigner.assign(scores, pred, points, labels, gt, torch.tensor([[True, True]]))
    assert int(fg.sum()) == 4  # top-2 each
    first = fg[0].nonzero().flatten().tolist()
    for a in first:
        centre = points[a]
        k = 0 if bool((centre < 16).all()) else 1
        torch.testing.assert_close(boxes[0, a], gt[0, k])
        assert int(tscores[0, a].argmax()) == k
    # normalised targets: each object's best anchor is asked for that object's best IoU (CIoU here, clamped at 0)
    from attnkit.models.detection import ciou
    for k in range(2):
        inside = [a for a in first if int(tscores[0, a].argmax()) == k]
        best = max(float(ciou(pred[0, a], gt[0, k])) for a in inside)
        assert max(float(tscores[0, a, k]) for a in inside) == pytest.approx(best, rel=1e-3)  # ε = 1e-7 beside t ≈ 1e-3


def test_mhsa_adds_at_least_its_attention_flops_and_its_parameters():
    plain, p5 = _det("plain"), _det("mhsa_p5")
    C, N = WIDTHS[4], 2 * 2  # P5 of a 64×64 image: 2×2 cells
    extra = forward_flops(p5, (1, 64, 64)) - forward_flops(plain, (1, 64, 64))
    assert extra >= 2 * (4 * N * C * C + 2 * N * N * C)  # four projections, scores and values (2 FLOPs per MAC)
    mh = sum(p.numel() for p in MHSA2d(C, 4).parameters())
    assert sum(p.numel() for p in p5.parameters()) - sum(p.numel() for p in plain.parameters()) == mh


def test_activation_memory_grows_with_attention_and_leaves_batchnorm_alone():
    x, t = torch.rand(4, 1, 64, 64), torch.tensor([[[0, 4.0, 4, 30, 30]]]).repeat(4, 1, 1)
    plain, p4p5 = _det("plain"), _det("mhsa_p4p5")
    before = plain.backbone.stem[0].bn.running_mean.clone()
    a, b = activation_mb(plain, x, t), activation_mb(p4p5, x, t)
    assert 0 < a < b
    torch.testing.assert_close(plain.backbone.stem[0].bn.running_mean, before)


@pytest.mark.usefixtures("one_thread")
def test_loss_falls_when_fitting_one_batch():
    m = _det("mhsa_p5")
    x = torch.zeros(2, 1, 64, 64)
    x[0, 0, 8:24, 8:24] = 1
    x[1, 0, 30:60, 20:40] = 1
    t = torch.tensor([[[0, 8.0, 8, 24, 24]], [[2, 20.0, 30, 40, 60]]])
    loss_fn = DetectionLoss(m)
    opt = torch.optim.AdamW(m.parameters(), 3e-3)
    first = None
    for _ in range(25):
        loss, parts = loss_fn(m(x), t)
        first = float(loss.detach()) if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.5 * first and set(parts) == {"box", "cls", "dfl"}
    with pytest.raises(ValueError, match=r"\(B=2, M, 5\)"):
        loss_fn(m(x), t[..., :4])
