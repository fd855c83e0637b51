"""Bad input that is easy to let through: an empty space, a YAML alias bomb, sizes without bound, a --set given twice,
a pinned --set outside its parameter's choices, a YAML key given twice, a number YAML 1.1 reads otherwise (0x3, 010,
1_000), an empty section on --set. Each is one line naming the field and what is allowed."""
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


def test_a_key_given_twice_in_a_file_names_both_lines(tmp_path):
    """The last value won silently; now the key and both lines are named, at any depth, in block and flow style. A
    ``<<`` merge overridden by the mapping's own key is YAML's own rule, and stays allowed."""
    path = tmp_path / "space.yaml"
    path.write_text("base:\n  clients:\n    lr: 0.1\n    batch_size: 16\n    lr: 0.2\n")
    with pytest.raises(ConfigError, match=rf"^lr: given twice in {path} \(lines 3 and 5\); a mapping takes each key "
                                          r"once: keep one$"):
        load_yaml(str(path))
    path.write_text("description: x\nbase: {rounds: 3, seed: 0, rounds: 4}\n")
    with pytest.raises(ConfigError, match=r"^rounds: given twice in .* \(lines 2 and 2\)"):
        load_yaml(str(path))
    path.write_text("shared: &shared {lr: 0.1, batch_size: 16}\nclients:\n  <<: *shared\n  lr: 0.2\n")
    assert load_yaml(str(path))["clients"] == {"lr": 0.2, "batch_size": 16}


@pytest.mark.parametrize("text, reads_as", [("0x3", 3), ("010", 8), ("0b11", 3), ("1_000", 1000), ("1:30", 90),
                                            ("1_0.5", 10.5), ("1:30.5", 90.5)])
def test_a_number_yaml_reads_otherwise_is_refused(text, reads_as, tmp_path):
    """YAML 1.1 reads these as numbers few readers would see in them; in a file and on --set each is one line with
    the value YAML would have used."""
    path = tmp_path / "experiment.yaml"
    path.write_text(f"seed: 0\nrounds: {text}\n")
    with pytest.raises(ConfigError, match=rf"^{path}: line 2: {text} is not a plain decimal (integer|number) \(YAML "
                                          rf"1.1 reads it as {reads_as:g}\); write it in decimal digits$"):
        load_yaml(str(path))
    with pytest.raises(ConfigError, match=rf"^--set rounds: {text} is not a plain decimal"):
        parse_override(f"rounds={text}")


def test_plain_numbers_and_strings_that_look_like_numbers_still_load(tmp_path):
    path = tmp_path / "experiment.yaml"
    path.write_text("a: -3\nb: +3\nc: 0\nd: 1.5e-3\ne: .inf\nf: '0x3'\ng: 1.0\nh: 12345678901234567890\n")
    assert load_yaml(str(path)) == {"a": -3, "b": 3, "c": 0, "d": 0.0015, "e": float("inf"), "f": "0x3", "g": 1.0,
                                    "h": 12345678901234567890}
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbfrounds: 3\n")  # a UTF-8 byte-order mark: still UTF-8
    assert load_yaml(str(tmp_path / "bom.yaml")) == {"rounds": 3}
    assert parse_override("clients.lr=1e-3") == ("clients.lr", 0.001)
    assert parse_override("public={source: none}") == ("public", {"source": "none"})


def test_an_empty_section_on_set_is_refused():
    with pytest.raises(ConfigError, match=r"^--set clients: an empty mapping would reset the whole section to its "
                                          r"defaults; set one value of it with --set clients.<key>=<value>$"):
        parse_override("clients={}")
