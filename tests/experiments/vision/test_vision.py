"""The vision experiment at a tiny size: results.json holds what the issue asks for, FLOPs count
the attention, the reading and verdicts follow from the numbers, the report section renders."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.vision.plots import eta_squared, reading_sentences, verdicts
from attnkit.experiments.vision.train import VisionExperiment, build_model, forward_flops

TINY = {**VisionExperiment.tiny, "train_limit": 96, "test_limit": 48}  # the report's tiny size, a few more images


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("vision")
    doc = run_experiment("vision", seeds=2, out=out, overrides=TINY, show_progress=False, device="cpu")
    return doc, out


def test_results_hold_accuracy_spread_params_flops_time(tiny_run):
    doc, out = tiny_run
    assert json.loads((out / "results.json").read_text())["experiment"] == "vision"
    r = doc["results"]
    assert r["data"]["name"] == "digits" and r["data"]["notice"] is None  # asked for explicitly: no fallback notice
    assert list(r["models"]) == ["resnet", "cbam", "mhsa", "vit"]
    for m in r["models"].values():
        assert len(m["acc"]["per_seed"]) == 2 and all(0.0 <= a <= 1.0 for a in m["acc"]["per_seed"])
        assert m["acc"]["std"] >= 0 and m["params"] > 0 and m["flops"] > 0 and m["train_time_s"]["mean"] > 0
    assert r["models"]["cbam"]["params"] > r["models"]["resnet"]["params"]
    assert {v["label"] for v in r["verdict"].values()} <= {"helped", "hurt", "no clear difference"}
    for f in r["figures"]:
        assert (out / f).stat().st_size > 1000
    assert "viewer_vit.html" in r["figures"] and "viewer_mhsa.html" in r["figures"]
    assert "accuracy_vs_cost.png" in r["figures"] and "vit_attention.png" in r["figures"]


FIGURES = ("accuracy_vs_cost.png", "gates_cbam.png", "cbam_spatial.png", "mhsa_query.png", "vit_attention.png")  # tiny: resnet, cbam, mhsa, vit


def test_every_figure_is_drawn_in_chinese_too_and_the_chinese_section_shows_those(tiny_run):
    import re

    from attnkit.page.figures import cjk_font, zh_path

    if cjk_font() is None:
        pytest.skip("no CJK font on this machine (apt-get install fonts-noto-cjk)")
    doc, out = tiny_run
    assert set(FIGURES) <= set(doc["results"]["figures"])
    for name in FIGURES:
        assert zh_path(out / name).is_file() and zh_path(out / name).read_bytes() != (out / name).read_bytes(), name
    html = get("vision").report(Results(doc["results"], out, doc), out, "zh").html
    shown = re.findall(r'<img alt="([^"]*)"[^>]*data-figure-lang="(\w+)"', html)
    assert shown and all(lang == "zh" for _, lang in shown), shown  # no figure left in English on the Chinese page
    assert "figure-en" not in html


def test_report_section_is_generated_from_the_numbers(tiny_run):
    doc, out = tiny_run
    sec = get("vision").report(Results(doc["results"], out, doc), out)
    acc = doc["results"]["models"]["resnet"]["acc"]["mean"]
    assert f"{100 * acc:.2f}" in sec.html and "ECA-Net" in sec.html and "<img" in sec.html
    assert "η²" in sec.html


def test_flops_include_the_attention_matmuls():
    cfg = dict(get("vision").quick)
    plain = build_model("resnet", cfg, (28, 28), 10)
    mhsa = build_model("mhsa", cfg, (28, 28), 10)
    C, N = 4 * cfg["width"], 7 * 7
    qkvo = 4 * 2 * N * C * C  # four projections
    scores_values = 2 * 2 * N * N * C  # q kᵀ and p v
    assert forward_flops(mhsa, (1, 28, 28)) - forward_flops(plain, (1, 28, 28)) >= qkvo + scores_values
    assert mhsa.layer3[-1].attn.backend == "auto"  # the counting backend was put back


def test_eta_squared_bounds():
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    one_hot = torch.nn.functional.one_hot(y).double()
    assert math.isclose(eta_squared(one_hot, y), 1.0)
    noise = torch.tensor([[0.1], [0.9], [0.1], [0.9], [0.1], [0.9]])
    assert math.isclose(eta_squared(noise, y), 0.0, abs_tol=1e-12)


def _model(acc, std, params=100, flops=1000, t=1.0):
    return {"acc": {"mean": acc, "std": std, "per_seed": [acc - std, acc + std]}, "params": params, "flops": flops,
            "train_time_s": {"mean": t}, "epochs": 2}


def test_verdicts_and_the_honest_sentence():
    models = {"resnet": _model(0.80, 0.01), "se": _model(0.85, 0.01, 110), "eca": _model(0.805, 0.01, 101), "cbam": _model(0.70, 0.01, 111)}
    v = verdicts(models)
    assert v["se"]["label"] == "helped" and v["eca"]["label"] == "no clear difference" and v["cbam"]["label"] == "hurt"
    assert v["se"]["extra_params"] == 10 and math.isclose(v["se"]["spread"], 2 * math.hypot(0.01, 0.01))  # the 2σ bar
    data = {"name": "fashion-mnist", "train": 10, "test": 5}
    text = " ".join(reading_sentences({"models": models, "verdict": v, "data": data}))
    assert "Fashion-MNIST" in text and "+5.00 points" in text and "None of the attention modules" not in text
    del models["se"]
    text = " ".join(reading_sentences({"models": models, "verdict": verdicts(models), "data": data}))
    assert "None of the attention modules beat the plain network" in text


def test_unknown_model_names_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="valid names: resnet, se, eca, cbam, mhsa, vit"):
        run_experiment("vision", seeds=1, out=tmp_path, overrides={**TINY, "models": "resnet,sse"}, show_progress=False, device="cpu")


def test_mhsa_reading_keeps_dense_weights_beyond_the_capture_default():
    from attnkit.experiments.vision.plots import read_mhsa
    from attnkit.modules.mhsa2d import MHSA2d

    m = torch.nn.Sequential(MHSA2d(8, 4)).eval()
    r = read_mhsa(m, torch.randn(1, 8, 36, 36))  # 1·4·1296² ≈ 6.7M weights > capture's 4M default
    assert r["grid"] == [36, 36] and 0 < r["mean_distance"] and 0 < r["self_mass"] < 1


# ------------------------------------------------------------------ the report section: committed run, Chinese, papers
import re  # noqa: E402
from pathlib import Path  # noqa: E402

from attnkit.experiments.vision.section import PAPERS, PUBLISHED, published_html, section  # noqa: E402
from attnkit.experiments.lab.committed import committed_runs  # noqa: E402

REPO_RESULTS = Path(__file__).resolve().parents[3] / "results"
CJK = re.compile(r"[\u4e00-\u9fff]")


def _results(models: dict, train: int, seeds_meta=None) -> dict:
    for m in models.values():
        m.setdefault("images_per_s", {"mean": 100.0})
    return {"data": {"name": "fashion-mnist", "train": train, "test": 50, "notice": None}, "models": models,
            "verdict": verdicts(models), "reading": {}, "figures": []}


def _fake_pair(tmp_path):
    quick = Results(_results({"resnet": _model(0.70, 0.02), "se": _model(0.72, 0.03, 110)}, train=200), tmp_path / "q", {})
    full = Results(_results({"resnet": _model(0.8963, 0.0029), "se": _model(0.8947, 0.0005, 110),
                             "cbam": _model(0.8875, 0.0018, 111)}, train=20000), tmp_path / "f", {"preset": "full", "seeds": [0, 1, 2]})
    return quick, full


def test_the_committed_full_run_is_read_first_and_the_quick_run_follows(tmp_path):
    quick, full = _fake_pair(tmp_path)
    html = section(quick, tmp_path, "en", full_results={"full": full}).html
    at_full, at_quick = html.index("The committed full run"), html.index("This report’s own run")
    assert at_full < html.index("89.63% ± 0.29%") < at_quick < html.index("70.00% ± 2.00%")
    assert html.index("None of the attention modules beat the plain network") < at_quick  # the claim is the committed run's
    assert "+CBAM did worse than the plain network by more than 2σ" in html
    assert html.count("<table>") == 3  # the committed run, the quick run, the papers
    alone = section(quick, tmp_path, "en").html
    assert "The committed full run" not in alone and "70.00% ± 2.00%" in alone and "89.63" not in alone


def test_chinese_prose_has_the_same_numbers_and_tables(tmp_path):
    quick, full = _fake_pair(tmp_path)
    en = section(quick, tmp_path, "en", full_results={"full": full}).html
    zh = section(quick, tmp_path, "zh", full_results={"full": full}).html
    numbers = lambda h: re.findall(r"[-+]?\d[\d,]*\.\d+", re.sub(r"<[^>]+>", " ", h))  # noqa: E731
    assert numbers(en) == numbers(zh)  # the same run's numbers, in the same order; only the words change
    assert en.count("<table>") == zh.count("<table>") and en.count("<h3>") == zh.count("<h3>")
    text = " ".join(re.findall(r"<p>(.*?)</p>", zh))
    assert "没有任何注意力模块" in text and "None of the" not in text and "points against" not in text
    assert len(CJK.findall(zh)) > 200 and not CJK.search(en)


def test_the_committed_fashion_mnist_run_says_no_attention_beat_resnet_beyond_noise(tmp_path):
    runs = committed_runs("vision", REPO_RESULTS)
    if "full" not in runs:
        pytest.skip("results/vision/full is not in this checkout")
    full = runs["full"]
    v = full["verdict"]
    assert not any(v[n]["label"] == "helped" for n in ("se", "eca", "cbam", "mhsa") if n in v)  # the data, read again
    for lang, claim in (("en", "None of the attention modules beat the plain network"), ("zh", "没有任何注意力模块")):
        html = section(full, tmp_path, lang, full_results=runs).html  # the page's folder: figures are drawn there, not in results/
        assert claim in html
        for m in full["models"].values():  # every mean ± std comes from the JSON
            assert f"{100 * m['acc']['mean']:.2f}% ± {100 * m['acc']['std']:.2f}%" in html


def test_published_numbers_follow_the_papers_tables():
    for p in PAPERS:
        err = re.search(r"top-1 error ([\d.]+) → ([\d./ ]+)\)", p["paper"])
        if err:  # the papers tabulate errors: top-1 accuracy = 100 − error
            assert math.isclose(p["baseline"], 100 - float(err.group(1)))
            assert [round(100 - float(e), 2) for e in err.group(2).split("/")] == [t for _, _, t in p["rows"]]
    eca = next(p for p in PAPERS if "ECA-Net" in p["paper"])
    assert {r["model"]: r["top1"] for r in PUBLISHED["rows"]} == {"resnet": eca["baseline"], **{m: t for m, _, t in eca["rows"]}}
    models = {"resnet": _model(0.80, 0.01), "se": _model(0.79, 0.01)}
    html = published_html({"verdict": verdicts(models)})
    assert "+1.51" in html and "+1.42" in html and "+1.90" in html and "+2.28" in html  # SE, SE (CBAM paper), CBAM, ECA
    assert "-1.00 ± 2.83" in html  # our difference beside theirs


def test_the_summary_row_gives_the_committed_verdict(tmp_path):
    from attnkit.experiments.vision.section import summary_row

    quick, full = _fake_pair(tmp_path)
    measured, meaning = summary_row(quick, "en")
    assert "70.00% ± 2.00%" in measured and "0 of 1 attention modules" in measured  # +SE within the quick spread
    measured, meaning = summary_row(quick, "en", {"full": full})
    assert measured.startswith("committed run 'full': ResNet 89.63% ± 0.29%; 0 of 2") and "bought nothing" in meaning
    zh = summary_row(quick, "zh", {"full": full})
    assert "89.63% ± 0.29%" in zh[0] and "2 个注意力模块中有 0 个" in zh[0] and CJK.search(zh[1])
    better = Results(_results({"resnet": _model(0.80, 0.01), "eca": _model(0.85, 0.01, 101)}, train=10), tmp_path, {"preset": "full"})
    measured, meaning = summary_row(quick, "en", {"full": better})
    assert "1 of 1 attention modules beat it beyond the seed spread (+ECA)" in measured and "can help" in meaning


def test_one_seed_gives_no_verdict_and_no_claim(tmp_path):
    from attnkit.experiments.vision.section import summary_row

    one = lambda acc: {"acc": {"mean": acc, "std": 0.0, "per_seed": [acc]}, "params": 100, "flops": 1000,  # noqa: E731
                       "train_time_s": {"mean": 1.0}, "epochs": 1, "images_per_s": {"mean": 10.0}}
    models = {"resnet": one(0.20), "mhsa": one(0.31), "cbam": one(0.10)}
    v = verdicts(models)
    assert v["mhsa"]["label"] == v["cbam"]["label"] == "one seed"  # +11 points on one seed is not "helped"
    res = {"data": {"name": "digits", "train": 64, "test": 32, "notice": None}, "models": models, "verdict": v, "reading": {}, "figures": []}
    text = " ".join(reading_sentences(res))
    assert "no spread to tell a difference from noise" in text and "helped" not in text and "None of the attention" not in text
    assert "no verdict" in summary_row(res)[0]
    assert "one seed: cannot tell" in section(Results(res, tmp_path, {}), tmp_path).html


# ------------------------------------------------------------------ the cost paragraph: read from the benchmark JSON
from attnkit.experiments.vision.cost import COST_FILE, cost_html, cost_sentences  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def _cost_row(size, impl, ms, mib, backend="blockwise"):
    return {"size": size, "impl": impl, "channels": 64, "heads": 4, "runs": 3, "device": "cpu", "threads": 1,
            "median_ms": ms, "peak_mib": mib, "backend": backend}


def test_cost_sentences_follow_the_json_in_both_languages(tmp_path):
    cost = {"rows": [_cost_row(20, "auto", 40.0, 20.0), _cost_row(20, "naive", 60.0, 50.0, "naive"),
                     _cost_row(80, "auto", 2000.0, 100.0), _cost_row(80, "naive", 9000.0, 3000.0, "naive"),
                     _cost_row(40, "blockwise", 1.0, 1.0)]}  # a size without the auto/naive pair is left out
    en, zh = cost_sentences(cost, "en"), cost_sentences(cost, "zh")
    assert len(en) == len(zh) == 2 and en[0].startswith("For a 20×20 feature map")  # sorted by size
    assert "40.0 ms and 20.0 MiB" in en[0] and "60.0 ms and 50.0 MiB" in en[0] and "1.50× the speed, 2.5× less memory" in en[0]
    assert "2,000 ms" in en[1] and "9,000 ms and 3,000 MiB" in en[1] and "4.50× the speed, 30.0× less memory" in en[1]
    for e, z in zip(en, zh):  # the same numbers in the Chinese sentence
        nums = lambda t: re.findall(r"\d+(?:[.,]\d+)*", t.replace("1/", ""))  # noqa: E731 (zh says "1/2.5", en "2.5× less")
        assert nums(e) == nums(z) and CJK.search(z)
    path = tmp_path / "vision_cost.json"
    path.write_text(json.dumps(cost))
    quick, full = _fake_pair(tmp_path)
    html = section(quick, tmp_path, "en", full_results={"full": full}, cost_file=path).html
    assert "The cost of self-attention over pixels" in html and "9,000 ms" in html
    assert html.index("published gain") < html.index("The cost of self-attention")  # after the papers' table
    for missing in (None, tmp_path / "absent.json"):
        assert "The cost of self-attention" not in section(quick, tmp_path, "en", cost_file=missing).html
    (tmp_path / "bad.json").write_text("{not json")
    assert cost_html("en", tmp_path / "bad.json") == ""


def test_the_committed_cost_benchmark_is_quoted_from_its_json():
    path = REPO / COST_FILE
    rows = {(r["size"], r["impl"]): r for r in json.loads(path.read_text())["rows"]}
    html = cost_html("en", path)
    for size in (20, 40, 80):  # the P5, P4, P3 maps of a 640-pixel input, each auto against naive
        a, n = rows[(size, "auto")], rows[(size, "naive")]
        assert f"For a {size}×{size} feature map" in html
        assert f"{n['median_ms'] / a['median_ms']:.2f}× the speed, {n['peak_mib'] / a['peak_mib']:.1f}× less memory" in html
    assert n["peak_mib"] / a["peak_mib"] > 10  # at 80×80 the naive layer's N² scores dominate its memory
    assert "速度是它的" in cost_html("zh", path)


def test_the_gate_figures_numbers_are_stored_and_drawn_again_from_them(tiny_run):
    """results.json keeps what the gate figures plot (class-mean channel gates, CBAM's spatial gate
    over its images), and the figures drawn from those numbers show exactly them."""
    import matplotlib.pyplot as plt
    import numpy as np

    from attnkit.experiments.vision.plots import gate_figures, run_figures

    doc, out = tiny_run
    stored = json.loads((out / "results.json").read_text())["results"]["plotted_gates"]
    (name, ch), = stored["channel"].items()  # tiny: cbam is the only gated model
    per_class = np.array(ch["per_class"])
    assert name == "cbam" and per_class.shape[0] == len(set(ch["classes"])) == 3 and ((per_class > 0) & (per_class < 1)).all()
    sp = stored["spatial"]
    gates, images = np.array(sp["gates"]), np.array(sp["images"])
    assert gates.shape[0] == images.shape[0] == len(sp["classes"]) == 4 and ((gates >= 0) & (gates <= 1)).all()
    assert images.shape[1:] == tuple(doc["results"]["data"]["image_size"]) and images.min() >= 0 and images.max() <= 1
    figures = dict(gate_figures(stored))
    assert set(figures) == {"gates_cbam.png", "cbam_spatial.png"} and set(figures) <= {n for n, _ in run_figures(doc["results"])}
    for lang in ("en", "zh"):
        fig = figures["gates_cbam.png"](lang)
        np.testing.assert_allclose(fig.axes[0].get_images()[0].get_array(), per_class, rtol=1e-6)
        plt.close(fig)
