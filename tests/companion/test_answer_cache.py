"""The released-answer cache: keyed on public data only, paraphrases, expiry, persistence,
fail closed."""

from __future__ import annotations

import numpy as np

from companion.answer.cache import AnswerCache, marked_words, scope_key


def _embed(texts: list[str]) -> np.ndarray:
    """A toy public embedder: bag of the words of a small vocabulary."""
    vocab = ["drug", "medicine", "clinic", "give", "get", "veltrosis", "marquine", "code", "pump"]
    out = []
    for t in texts:
        words = t.lower().replace("?", " ").replace(".", " ").split()
        v = np.array([float(sum(1 for w in words if w.startswith(x[:4]))) for x in vocab])
        out.append(v + 0.01)
    return np.asarray(out, dtype=np.float32)


Q1 = "Which drug does the clinic give for Veltrosis?"
Q2 = "What medicine does the clinic give for Veltrosis?"
Q3 = "Which drug does the clinic give for Marquine?"


def _cache(tmp_path, **kw) -> AnswerCache:
    return AnswerCache(tmp_path / "a.sqlite3", embed=_embed, **kw)


def test_exact_and_paraphrase_hits_miss_on_another_subject(tmp_path) -> None:
    cache = _cache(tmp_path, similarity=0.7)
    scope = scope_key("clinic", {"name": "dp_answer", "params": {"epsilon": 5}}, "m")
    assert cache.lookup(scope, [{"role": "user", "content": Q1}]) is None
    assert cache.store(scope, [{"role": "user", "content": Q1}], "zolvexin", {"released": True})
    hit = cache.lookup(
        scope, [{"role": "user", "content": "  which DRUG does the clinic give for veltrosis "}]
    )
    assert hit is not None and hit.matched == "exact" and hit.answer == "zolvexin"
    para = cache.lookup(scope, [{"role": "user", "content": Q2}])
    assert para is not None and para.matched == "paraphrase"
    # another subject (a different marked word) never matches, however similar
    assert cache.lookup(scope, [{"role": "user", "content": Q3}]) is None
    # another defense or collection is another scope
    other = scope_key("clinic", {"name": "dp_answer", "params": {"epsilon": 2}}, "m")
    assert cache.lookup(other, [{"role": "user", "content": Q1}]) is None


def test_entries_expire_and_persist_across_a_restart(tmp_path) -> None:
    now = [1000.0]
    cache = _cache(tmp_path, ttl_seconds=60, clock=lambda: now[0])
    scope = scope_key("c", {}, "m")
    cache.store(scope, [{"role": "user", "content": Q1}], "a", {})
    cache.close()
    again = _cache(tmp_path, ttl_seconds=60, clock=lambda: now[0])
    assert again.lookup(scope, [{"role": "user", "content": Q1}]) is not None
    now[0] += 61
    assert again.lookup(scope, [{"role": "user", "content": Q1}]) is None
    assert len(again) == 0


def test_a_damaged_entry_is_not_served_and_clear_removes(tmp_path) -> None:
    cache = _cache(tmp_path)
    scope = scope_key("c", {}, "m")
    cache.store(scope, [{"role": "user", "content": Q1}], "a", {})
    cache._conn.execute("UPDATE answers SET veil = 'not json'")
    assert cache.lookup(scope, [{"role": "user", "content": Q1}]) is None
    cache.store(scope_key("d", {}, "m"), [{"role": "user", "content": Q1}], "b", {})
    assert cache.clear("c") == 1 and len(cache) == 1
    assert cache.clear() == 1


def test_marked_words_are_the_subject() -> None:
    assert marked_words("Which drug does the clinic give for Veltrosis?") == ["veltrosis"]
    assert marked_words("What code does the Halvex pump show, K-39?") == ["halvex", "k-39"]
    assert marked_words("What is the phone number of the patient Ann Lee?") == ["ann", "lee"]
