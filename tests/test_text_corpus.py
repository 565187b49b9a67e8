"""The word-level corpora of verify.tasks.text_corpus: WikiText-2 token files (a fixture written
here in their format) and the pydoc_data topics that ship with Python."""

import numpy as np
import pytest

from verify.tasks import text_corpus as tc

# Three splits in the format of wiki.*.tokens: a blank first line, " = Heading = " lines, one
# paragraph per line, tokens separated by spaces, WikiText's own <unk> and @-@ tokens.
TRAIN = (" \n = Valkyria Chronicles = \n \n The game was released in 2011 . The game sold well . \n"
         " It was made by the team @-@ members of the <unk> studio . \n")
VALID = " = Reception = \n The game received praise . \n"
TEST = " The sequel was released in 2012 . \n"


@pytest.fixture
def wikitext_dir(tmp_path):
    for split, text in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        (tmp_path / f"wiki.{split}.tokens").write_text(text, encoding="utf-8")
    return tmp_path


def test_wikitext_lines_become_tokens_with_eos(wikitext_dir):
    c = tc.load_wikitext2(wikitext_dir)
    assert c.name == "wikitext2" and c.vocab[0] == "<unk>"
    train = c.decode(c.train).split()
    # every line, the blank ones included, ends with <eos>; the tokens are the files' own
    assert train == (["<eos>", "=", "Valkyria", "Chronicles", "=", "<eos>", "<eos>"]
                     + "The game was released in 2011 . The game sold well .".split() + ["<eos>"]
                     + "It was made by the team @-@ members of the <unk> studio .".split() + ["<eos>"])
    assert c.stats["train_tokens"] == len(train) == c.train.size
    # the vocabulary comes from the training split: valid's "Reception", "received", "praise" are <unk>
    valid = c.decode(c.valid).split()
    assert valid == "= <unk> = <eos> The game <unk> <unk> . <eos>".split()
    assert c.stats["valid_unk_fraction"] == pytest.approx(3 / 10)
    assert c.decode(c.test).split() == "The <unk> was released in <unk> . <eos>".split()
    assert c.train.dtype == np.int64


def test_vocabulary_cap_keeps_the_most_frequent_with_ties_alphabetical(wikitext_dir):
    c = tc.load_wikitext2(wikitext_dir, vocab_size=6)
    # counts in train: <eos> 5, "." 3, "The" 2, "game" 2, "was" 2, "=" 2, then 1 each
    assert c.vocab == ("<unk>", "<eos>", ".", "=", "The", "game")
    assert c.vocab_size == 6
    assert set(c.decode(c.train).split()) <= set(c.vocab)
    assert tc.build_vocabulary(["b", "a", "b", "<unk>", "c", "a"], 3) == ("<unk>", "a", "b")
    with pytest.raises(ValueError, match="^vocab_size: "):
        tc.build_vocabulary(["a"], 1)


def test_missing_wikitext_files_and_bad_names_raise_naming_the_argument(tmp_path, monkeypatch):
    (tmp_path / "wiki.train.tokens").write_text(TRAIN)
    with pytest.raises(ValueError, match=r"^path: .*wiki\.valid\.tokens, wiki\.test\.tokens"):
        tc.load_wikitext2(tmp_path)
    with pytest.raises(ValueError, match="^path: "):
        tc.load_wikitext2(3)
    monkeypatch.delenv(tc.WIKITEXT2_ENV, raising=False)
    with pytest.raises(ValueError, match="^corpus: .*WIKITEXT2_DIR"):
        tc.load_corpus("wikitext2")
    with pytest.raises(ValueError, match="^corpus: "):
        tc.load_corpus("penn")
    with pytest.raises(ValueError, match="^split: "):
        tc.load_pydoc(100).split("dev")


def test_load_corpus_reads_the_folder_in_the_environment(wikitext_dir, monkeypatch):
    monkeypatch.setenv(tc.WIKITEXT2_ENV, str(wikitext_dir))
    assert tc.load_corpus("wikitext2").name == "wikitext2"
    assert tc.load_corpus("auto").name == "wikitext2"
    assert tc.load_corpus("pydoc", 100).name == "pydoc"
    monkeypatch.delenv(tc.WIKITEXT2_ENV)
    assert tc.load_corpus("auto", 100).name == "pydoc"


def test_pydoc_text_is_put_in_wikitext_form():
    text = ("The \"assert\" statement\n**********************\n\nAssert statements are a\nconvenient way.\n\n"
            "+------+------+\n| x    | y-1  |\n+------+------+\n")
    assert tc.wikitext_lines(text) == ['The " assert " statement', "Assert statements are a convenient way .",
                                       "| x | y - 1 |"]
    with pytest.raises(ValueError, match="^text: "):
        tc.wikitext_lines(b"bytes")


def test_pydoc_corpus_splits_by_topic_and_is_deterministic():
    from pydoc_data.topics import topics

    a, b = tc.load_pydoc(500), tc.load_pydoc(500)
    assert a.vocab == b.vocab and all(np.array_equal(a.split(s), b.split(s)) for s in tc.SPLITS)
    assert a.vocab_size == 500 and a.vocab[0] == "<unk>" and "<eos>" in a.vocab and "the" in a.vocab
    assert all(w and not any(ch.isspace() for ch in w) for w in a.vocab)
    # about 0.5 MB of text: some 10^5 tokens, most of them in the training split
    assert a.train.size > 50_000 and a.valid.size > 3_000 and a.test.size > 3_000
    assert a.train.size > 5 * a.valid.size
    assert 0.0 < a.stats["train_unk_fraction"] < 0.25
    full = tc.load_pydoc()
    assert full.stats["train_unk_fraction"] == 0.0 and full.vocab_size == full.stats["distinct_train_tokens"] + 1
    # the documents of the validation split are the topics k with k % 10 == 5, in sorted order
    keys = sorted(topics)
    first_valid = tc.tokenize_lines(tc.wikitext_lines(topics[keys[5]]))
    assert full.decode(full.valid[:len(first_valid)]).split() == [w if w in full.vocab else "<unk>"
                                                                  for w in first_valid]
    assert "Python" in a.source


def test_windows_are_next_token_pairs():
    ids = np.arange(100, dtype=np.int64)
    x, y = tc.sample_windows(np.random.default_rng(0), ids, T=8, batch=5)
    assert x.shape == y.shape == (5, 8)
    np.testing.assert_array_equal(y, x + 1)                      # targets are the inputs shifted by one
    assert np.all(np.diff(x, axis=1) == 1) and x.min() >= 0 and y.max() <= 99
    x2, _ = tc.sample_windows(np.random.default_rng(0), ids, T=8, batch=5)
    np.testing.assert_array_equal(x, x2)
    ex, ey = tc.eval_windows(ids, T=10)
    assert ex.shape == (9, 10) and ex[1, 0] == 10 and ey[-1, -1] == 90
    assert tc.eval_windows(ids, T=10, max_windows=3)[0].shape == (3, 10)
    with pytest.raises(ValueError, match="^T: "):
        tc.sample_windows(np.random.default_rng(0), ids, T=100, batch=1)
    with pytest.raises(ValueError, match="^rng: "):
        tc.sample_windows(0, ids, T=8, batch=1)
    with pytest.raises(ValueError, match="^ids: "):
        tc.eval_windows(np.zeros((2, 50), dtype=np.int64), T=8)
