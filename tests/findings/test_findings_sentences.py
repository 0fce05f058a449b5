"""Every sentence builder the notebooks display, run on the bundled recording (data/h200) as
the notebooks call it, writes sentences of at most 40 words (house style, issue 31). The
rendered notebooks are checked by tests/project/test_prose_sentences.py; this test checks the
builders themselves, so a notebook re-rendered from a new recording starts from short ones."""

from __future__ import annotations

import pytest

from h2dlab.explain import outliers
from h2dlab.findings import advice, factors, forum_claims, openmp, speed, spikes, stability, transfer
from h2dlab.findings import claims as findings
from h2dlab.recording import datasets, session
from tests.project.test_prose_sentences import MAX_WORDS, sentences, words


@pytest.fixture(scope="module")
def data():
    rec = session.recording("h200", mode="replay")
    d = {
        "rec": rec,
        "a100": datasets.load("forum_a100"),
        "forum": rec.get("forum"),
        "sweep": rec.get("sweep", "pow2-interleaved"),
        "reuse": rec.get("sweep", "forum-sizes"),
        "cold": rec.get("allocator", "pin-emptied"),
        "warm": rec.get("allocator", "pin-warm"),
        "reg": rec.get("allocator", "pin-register-emptied"),
        "kept": rec.get("allocator", "device-cache-kept"),
        "dropped": rec.get("allocator", "device-empty-cache"),
        "d2h": rec.get("d2h"),
        "bidir": rec.get("bidir"),
        "batch": rec.get("batch", "equal"),
        "idle": rec.get("idle"),
        "bench": datasets.load_benchmark("h200"),
    }
    d["ea"], d["ef"] = outliers.explain(d["a100"]), outliers.explain(d["forum"])
    d["adv"] = advice.advice(d["sweep"], 2**30, cold=d["cold"], d2h=rec.get("d2h", "d2h"), batch=d["batch"])
    return d


BUILDERS = {
    "context_startup": lambda d: [findings.context_startup(d["a100"]), findings.context_startup(d["forum"])],
    "allocator_rule": lambda d: [findings.ALLOCATOR_RULE + ".", findings.EMPTY_CACHE_NOTE + "."],
    "host_alloc_growth": lambda d: [
        findings.host_alloc_growth(d["forum"]),
        findings.host_alloc_growth(d["a100"]),
        findings.host_alloc_growth(d["warm"]),
        findings.host_alloc_growth(d["cold"], emptied_each_size=True, reuse=d["warm"]),
        findings.host_alloc_growth(d["reg"], emptied_each_size=True, reuse=d["warm"]),
    ],
    "device_alloc_cost": lambda d: [
        findings.device_alloc_cost(d["forum"], d["reuse"]),
        findings.device_alloc_cost(d["dropped"], d["kept"], strategy="pageable", baseline="pageable"),
    ],
    "forum_claims": lambda d: [
        forum_claims.single_shot_spread(d["reuse"]),
        forum_claims.episodes(d["ea"]),
        forum_claims.slow_stretch(d["ea"]),
        forum_claims.episodes(d["ef"]),
        forum_claims.size_pair(d["ea"], d["forum"]),
        forum_claims.link_estimate(d["a100"], d["forum"], d["reuse"]),
    ],
    "clocks_and_machine": lambda d: [
        findings.clocks(d["forum"]),
        factors.machine(d["rec"].env("sweep", "pow2-interleaved"), failed_rows=0),
        factors.gpu_clocks(d["sweep"]),
    ],
    "advice": lambda d: [
        advice.pin_first_pays(d["adv"]),
        advice.pin_first_pays(advice.advice(d["sweep"], 2**26, cold=d["cold"])),
        advice.pin_cached_pays(d["sweep"]),
        advice.registering_cost(d["sweep"]),
        advice.best_way(d["adv"]),
        advice.best_way(d["adv"], copies=100),
        *(advice.best_way(d["adv"], case=c) for c in d["adv"].case.unique()[1:]),
        advice.memory_kind(d["sweep"], 2**30),
        advice.memory_kind(d["sweep"], 2**16),
        advice.small_copy_floor(d["sweep"]),
    ],
    "speed": lambda d: [
        advice.host_copy_ceiling(d["bench"]),
        speed.staged_bounds(d["bench"]),
        speed.staged_timeline(d["bench"]["timeline_256MiB"], d["bench"]),
    ],
    "transfer": lambda d: [
        transfer.direction_bandwidth(d["d2h"]),
        transfer.pageable_back(d["d2h"]),
        transfer.duplex_summary(d["bidir"]),
        transfer.batch_overhead(d["batch"]),
        transfer.best_batch_method(d["batch"]),
    ],
    "causes": lambda d: [
        *(factors.unexplained(e) for e in (d["ea"], d["ef"])),
        *(openmp.host_parallel(e) for e in (d["ea"], d["ef"])),
        spikes.top_causes({"forum": d["ef"]}),
        spikes.top_causes({"forum_a100": d["ea"]}),
    ],
    "idle_and_openmp": lambda d: [
        factors.idle_wake(d["idle"]),
        openmp.openmp_wait(datasets.load("h200_omp")),
    ],
    "stability": lambda d: [
        stability.host_side(
            stability.same_model(
                "NVIDIA H200", stability.Sweep("h200", d["rec"].date(), d["sweep"], d["cold"])
            )
        ),
        stability.forum_pinning(d["ea"], d["forum"]),
    ],
}


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_sentence_builders_write_at_most_40_words_a_sentence_on_the_bundled_recording(data, builder):
    texts = [str(f) for f in BUILDERS[builder](data)]
    assert texts and all(texts)
    long = [(words(s), s) for t in texts for s in sentences(t) if words(s) > MAX_WORDS]
    assert not long, f"{builder}: {len(long)} sentences over {MAX_WORDS} words, first: {long[0]}"
