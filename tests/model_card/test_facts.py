"""What a card may claim: the licence checked and recorded on the model for every card written afterwards."""

from __future__ import annotations

import re

import pytest
from huggingface_hub import ModelCard
from tiny_models import make_model

from hf_atr.model_card import check_license, record_sharing_terms, write_model_card


def test_without_a_licence_the_card_claims_none_and_says_that_one_must_be_set(tmp_path):
    path = write_model_card(make_model(), tmp_path)
    card = ModelCard.load(path)
    assert card.data.license is None and "license" not in card.content.split("---")[1]
    assert (
        "## Licence\n\nNo licence was set when this card was written, so none is claimed. Set one before sharing "
        "the model (`hf-atr train --license`, `write_model_card(license=...)`, or the `license` field of this "
        "card's metadata)"
    ) in card.content


def test_a_licence_the_hub_does_not_list_is_other_with_its_name_and_link(tmp_path):
    model = make_model()
    record_sharing_terms(model, license="other", license_name="my-license-1.0", license_link="LICENSE")
    model.save_pretrained(tmp_path)  # every card written afterwards carries it
    card = ModelCard.load(tmp_path / "README.md")
    assert (card.data.license, card.data.license_name, card.data.license_link) == (
        "other", "my-license-1.0", "LICENSE",
    )  # fmt: skip
    assert "## Licence\n\n`other`: [my-license-1.0](LICENSE)" in card.content
    # An argument given to write_model_card replaces what was recorded.
    text = write_model_card(model, tmp_path / "again", license="cc-by-nc-4.0").read_text()
    assert "license: cc-by-nc-4.0" in text and "license_name" not in text


@pytest.mark.parametrize(
    ("license", "name", "link", "message"),
    [
        (
            "Apache 2.0",
            None,
            None,
            "license 'Apache 2.0' is not a licence id: give the Hub's id of the licence",
        ),
        ("other", None, "LICENSE", "license other needs license_name: a short id of the licence"),
        ("other", None, None, "license other needs license_name and license_link"),
        ("mit", "mine", None, "license_name and license_link go with license other; 'mit' is a licence id"),
        (None, None, "LICENSE", "license_name and license_link name a licence the Hub does not list"),
        ("other", "My Licence", "LICENSE", "license_name 'My Licence' must be a short id in lower case"),
    ],
)
def test_a_bad_licence_is_refused_naming_what_to_give(tmp_path, license, name, link, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        write_model_card(make_model(), tmp_path, license=license, license_name=name, license_link=link)
    assert check_license("CC-BY-NC-4.0") == "cc-by-nc-4.0"
