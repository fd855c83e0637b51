"""Bad input that is easy to let through: an empty space, a YAML alias bomb, sizes without bound, a --set given twice,
a pinned --set outside its parameter's choices. Each is one line naming the field and what is allowed."""
import pytest

from platform.config.experiment import build_experiment, load_yaml, parse_override, parse_overrides
from platform.config.search_space import load_search_space
from platform.errors import ConfigError

BOMB = "a: &a [" + ",".join(["lol"] * 9) + "]\n" + "".join(
    f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, n in zip("abcdefg", "bcdefgh"))


def test_an_alias_bomb_is_refused_without_being_expanded(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)  # 9^8 = 43 million values once expanded; a few hundred bytes as written
    with pytest.raises(ConfigError, match=r"expands to more than 1,000,000 values .* allowed: at most 1,000,000"):
        load_yaml(str(path))
    with pytest.raises(ConfigError, match=r"^--set description: its YAML expands"):
        parse_override("description=" + "[" + ",".join(["&x [" + ",".join(["1"] * 1000) + "]"]
                                                       + ["*x"] * 1200) + "]")


def test_an_empty_space_is_refused(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(ConfigError, match="is empty; a search space needs at least base"):
        load_search_space(str(path))


@pytest.mark.parametrize("key, value, message", [
    ("clients", {"num_clients": 10**9, "clients_per_round": 1}, "clients.num_clients: must be <= 10000000"),
    ("rounds", 10**12, "rounds: must be <= 1000000"),
    ("clients", {"local_epochs": 10**6}, "clients.local_epochs: must be <= 100000"),
])
def test_sizes_have_upper_bounds(key, value, message):
    with pytest.raises(ConfigError) as err:
        build_experiment({key: value})
    assert str(err.value).startswith(message)


def test_a_key_given_twice_is_refused():
    assert parse_overrides(["a.b=1", "c=x"]) == {"a.b": 1, "c": "x"}
    with pytest.raises(ConfigError, match=r"^--set: clients.lr is given twice \(0.1, then 0.2\); give it once$"):
        parse_overrides(["clients.lr=0.1", "clients.lr=0.2"])


def test_a_pinned_value_must_be_one_of_the_choices():
    space = load_search_space("smoke", {"algorithm.name": "fedprox"})
    assert "algorithm.name" not in space.parameters
    with pytest.raises(ConfigError, match=r"^--set algorithm.name: 'fedpa' is not one of the values the space sweeps; "
                                          r"allowed: 'fedavg', 'fedprox'"):
        load_search_space("smoke", {"algorithm.name": "fedpa"})
    assert load_search_space("smoke", {"clients.lr": 0.5}).base["clients"]["lr"] == 0.5  # a range may be left
