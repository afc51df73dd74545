"""List prices of known models."""

from lightfoot_pipeline.models.prices import list_price


def test_list_prices_include_the_papers_model_whatever_its_prefix_and_case():
    assert list_price("meta-llama/Llama-3.3-70B-Instruct") == (0.10, 0.32)
    assert list_price("llama-3.3-70b-instruct") == (0.10, 0.32)
    assert list_price("Meta-Llama/LLAMA-3.3-70B-INSTRUCT") == (0.10, 0.32)
    assert list_price("no-such-model") is None
