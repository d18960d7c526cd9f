"""The recipes' one profile loader (``agentrl.recipes.profiles``) and the profiles it reads."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from agentrl.recipes.profiles import BASE_KEY, ProfileError, load_profile
from agentrl.recipes.search_qa import FULL, PROFILE_DIR, TINY, RecipeProfile


@dataclass(frozen=True)
class Toy:
    name: str
    steps: int
    lr: float
    sizes: dict[str, int]
    limit: int | None = None
    overrides: dict[str, object] = field(default_factory=dict, metadata={BASE_KEY: "overrides_base"})


def write(tmp_path, text, name="toy.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_profile_is_its_yaml_file_typed_with_defaults_for_the_keys_left_out(tmp_path):
    toy = load_profile(write(tmp_path, "name: t\nsteps: 3\nlr: 1\nsizes: {a: 2, b: 1}\n"), Toy)
    assert toy == Toy("t", 3, 1.0, {"a": 2, "b": 1})
    assert isinstance(toy.lr, float) and list(toy.sizes) == ["a", "b"], "ints become floats, order is kept"


def test_an_unknown_key_fails_naming_the_file_and_the_key(tmp_path):
    path = write(tmp_path, "name: t\nsteps: 3\nlr: 1.0\nsizes: {}\nstepz: 4\n")
    with pytest.raises(ProfileError, match=r"unknown key 'stepz'") as error:
        load_profile(path, Toy)
    assert str(path) in str(error.value) and "overrides_base" in str(error.value)


def test_a_missing_key_and_a_wrong_type_fail_by_name(tmp_path):
    with pytest.raises(ProfileError, match="missing key 'lr'"):
        load_profile(write(tmp_path, "name: t\nsteps: 3\nsizes: {}\n"), Toy)
    with pytest.raises(ProfileError, match=r"'lr'.*expected float.*3\.0e-3"):
        load_profile(write(tmp_path, "name: t\nsteps: 3\nlr: 1e-3\nsizes: {}\n"), Toy)
    with pytest.raises(ProfileError, match=r"'sizes'\]?\['a'\].*expected int"):
        load_profile(write(tmp_path, "name: t\nsteps: 3\nlr: 1.0\nsizes: {a: x}\n"), Toy)


def test_a_base_file_supplies_the_shared_entries_and_the_profile_wins(tmp_path):
    write(tmp_path, "x: 1\ny: 2\n", "shared.yaml")
    text = "name: t\nsteps: 3\nlr: 1.0\nsizes: {}\noverrides_base: shared.yaml\noverrides: {y: 5, z: 6}\n"
    assert load_profile(write(tmp_path, text), Toy).overrides == {"x": 1, "y": 5, "z": 6}


def test_the_search_qa_profiles_are_the_yaml_files_in_the_recipe_folder():
    assert load_profile(PROFILE_DIR / "full.yaml", RecipeProfile) == FULL
    assert load_profile(PROFILE_DIR / "tiny.yaml", RecipeProfile) == TINY
    # the demonstrations draw one seeded sample per dataset in this order: the order is data too
    assert list(FULL.demo_candidates) == list(TINY.demo_candidates) == ["nq", "triviaqa", "hotpotqa"]
    assert FULL.dense and not TINY.dense and TINY.rl_overrides["trainer.val_before_train"] is False
    assert FULL.sft_lr == 5.0e-5 and FULL.lora_overrides["actor.optim.lr"] == 5.0e-5
    assert FULL.eval_options == {"engine": "vllm"} and TINY.eval_options["engine"] == "hf"
