"""Config validation: every bad value gets one error naming the field and what is allowed."""
import pytest

from platform.config.experiment import parse_override
from platform.preflight import load_experiment
from platform.errors import ConfigError


def _error(data=None, overrides=()):
    with pytest.raises(ConfigError) as info:
        load_experiment(data or {}, list(overrides))
    message = str(info.value)
    assert "\n" not in message
    return info.value, message


def test_defaults_are_valid_and_flatten_to_dotted_keys():
    config = load_experiment({})
    flat = config.flat()
    assert flat["algorithm.name"] == "fedavg"
    assert flat["partition.alpha"] == 0.5 and flat["clients.num_clients"] == 10


def test_overrides_parse_yaml_scalars_and_reach_algorithm_params():
    config = load_experiment({}, ["algorithm.name=fedprox", "algorithm.mu=0.25", "rounds=3", "clients.lr=1e-2"])
    assert config.algorithm.name == "fedprox" and config.algorithm.params.mu == 0.25
    assert config.rounds == 3 and config.clients.lr == 0.01


def test_unknown_algorithm_lists_allowed():
    err, msg = _error({"algorithm": {"name": "fedmagic"}})
    assert err.field == "algorithm.name" and "fedavg" in msg and "fedprox" in msg


def test_unknown_model_lists_allowed():
    err, msg = _error({"model": {"name": "resnet9000"}})
    assert err.field == "model.name" and "cnn" in msg


def test_unknown_dataset_lists_allowed():
    err, msg = _error({"dataset": {"name": "imagenet"}})
    assert err.field == "dataset.name" and "digits" in msg


@pytest.mark.parametrize("alpha", [0, -1.0])
def test_alpha_must_be_positive(alpha):
    err, msg = _error({"partition": {"alpha": alpha}})
    assert err.field == "partition.alpha" and "> 0" in msg


def test_clients_per_round_cannot_exceed_clients():
    err, msg = _error({"clients": {"num_clients": 5, "clients_per_round": 6}})
    assert err.field == "clients.clients_per_round" and "5" in msg


def test_negative_lr_rejected():
    err, msg = _error(overrides=["clients.lr=-0.1"])
    assert err.field == "clients.lr" and "> 0" in msg


def test_unknown_set_key_names_allowed_keys():
    err, msg = _error(overrides=["clients.learning_rate=0.1"])
    assert err.field == "clients.learning_rate" and "lr" in msg
    err, msg = _error(overrides=["nonsense=1"])
    assert err.field == "nonsense" and "dataset" in msg


def test_hyperparameter_of_another_algorithm_rejected():
    err, msg = _error(overrides=["algorithm.mu=0.1"])
    assert err.field == "algorithm.mu" and "fedavg" in msg


def test_wrong_type_rejected():
    err, msg = _error({"rounds": "many"})
    assert err.field == "rounds" and "integer" in msg


def test_missing_data_root_names_expected_files(tmp_path):
    err, msg = _error({"dataset": {"name": "mnist", "root": str(tmp_path / "nowhere")}})
    assert err.field == "dataset.root" and "does not exist" in msg and "train-images-idx3-ubyte" in msg
    err, msg = _error({"dataset": {"name": "cifar10"}})
    assert err.field == "dataset.root" and "set dataset.root" in msg


def test_missing_files_under_existing_root_are_listed(tmp_path):
    (tmp_path / "MNIST" / "raw").mkdir(parents=True)
    (tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte").write_bytes(b"")
    err, msg = _error({"dataset": {"name": "mnist", "root": str(tmp_path)}})
    assert "3 file(s)" in msg and "t10k-labels-idx1-ubyte" in msg


def test_override_syntax_error():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("rounds")


def test_seed_streams_are_separate_and_derived():
    config = load_experiment({"seed": 3})
    seeds = {s: config.stream_seed(s) for s in ("partition", "init", "sampling", "training", "noise")}
    assert len(set(seeds.values())) == 5
    assert load_experiment({"seed": 3}).stream_seed("init") == seeds["init"]
    explicit = load_experiment({"seed": 3, "seeds": {"partition": 7}})
    assert explicit.stream_seed("partition") == 7 and explicit.stream_seed("init") == seeds["init"]


def test_partition_seed_from_the_replicate_seed():
    """seeds.partition_from_seed: replicate seed s partitions with seed s exactly; without it nothing changes."""
    import numpy as np

    from platform.config.experiment import SEED_STREAMS
    from platform.runtime.federation import one_round_stage_fields
    from platform.runtime.seeding import replicate_over_seeds

    def derived(seed, stream):  # the derivation every stream had before, pinned
        return int(np.random.SeedSequence([seed, SEED_STREAMS.index(stream)]).generate_state(1)[0])

    seeds = list(range(1, 11))
    on = load_experiment({"seed": 0, "seeds": {"partition_from_seed": True}})
    assert on.stream_seed("partition") == 0
    for config in replicate_over_seeds(on, seeds):
        assert config.stream_seed("partition") == config.seed  # exactly the replicate's seed
        assert all(config.stream_seed(s) == derived(config.seed, s) for s in SEED_STREAMS if s != "partition")
    assert [c.stream_seed("partition") for c in replicate_over_seeds(on, seeds)] == seeds
    # without it: every stream derived as before, and an explicit partition seed is the same in every replicate
    off = load_experiment({"seed": 0})
    assert off.seeds.partition_from_seed is False
    for config in replicate_over_seeds(off, seeds):
        assert all(config.stream_seed(s) == derived(config.seed, s) for s in SEED_STREAMS)
        assert config.stream_seed("partition") != config.seed
    fixed = load_experiment({"seeds": {"partition": 7}})
    assert [c.stream_seed("partition") for c in replicate_over_seeds(fixed, seeds)] == [7] * 10
    # the cached one-round client stage tells the two apart (same seed, different partition)
    assert one_round_stage_fields(on) != one_round_stage_fields(off)
    # typed and validated: a boolean, and not together with a fixed partition seed
    err, msg = _error({"seeds": {"partition": 7, "partition_from_seed": True}})
    assert err.field == "seeds.partition_from_seed" and "not both" in msg
    err, msg = _error({"seeds": {"partition_from_seed": "yes"}})
    assert err.field == "seeds.partition_from_seed" and "true or false" in msg


def test_heterogeneous_architectures_need_a_method_that_declares_them():
    err, msg = _error({"algorithm": {"name": "fedkp"}, "model": {"architectures": ["cnn", "mlp"]}})
    assert err.field == "model.architectures" and "'fedkp'" in msg and "fedavg" in msg and "feded" in msg


def test_architecture_shares_and_seeded_assignment():
    from platform.config.models import assign_architectures

    assert assign_architectures(["cnn", "mlp", "leaf_cnn"], 20).count("cnn") == 6  # 6/7/7: later blocks larger
    shares = assign_architectures([{"name": "cnn", "share": 3}, {"name": "mlp"}], 8)
    assert shares == ["cnn"] * 6 + ["mlp"] * 2
    seeded = assign_architectures(["cnn", "mlp"], 10, seed=3)
    assert sorted(seeded) == sorted(assign_architectures(["cnn", "mlp"], 10))  # same counts, permuted
    assert seeded == assign_architectures(["cnn", "mlp"], 10, seed=3) != assign_architectures(["cnn", "mlp"], 10, 4)
    err, msg = _error({"model": {"architectures": [{"name": "cnn", "share": 0}]}})
    assert err.field == "model.architectures[0].share" and "> 0" in msg


def test_augmentation_and_precision_are_off_by_default_and_checked():
    clients = load_experiment({}).clients
    assert (clients.augment, clients.augment_padding, clients.precision) == ("none", 4, "fp32")
    on = load_experiment({}, ["clients.augment=crop_flip", "clients.augment_padding=2", "clients.precision=bf16"])
    assert (on.clients.augment, on.clients.augment_padding, on.clients.precision) == ("crop_flip", 2, "bf16")
    for overrides, field, allowed in ((["clients.augment=rotate"], "clients.augment", "crop_flip"),
                                      (["clients.precision=fp16"], "clients.precision", "bf16"),
                                      (["clients.augment_padding=-1"], "clients.augment_padding", ">= 0")):
        err, message = _error(overrides=overrides)
        assert err.field == field and allowed in message, message
    # crops and flips need images: vector data refuse them at load (platform.preflight.check_augmentation)
    assert load_experiment({"dataset": {"name": "synthetic"}, "model": {"name": "mlp"}}).clients.augment == "none"
    err, message = _error({"dataset": {"name": "synthetic"}, "model": {"name": "mlp"},
                           "clients": {"augment": "crop_flip"}})
    assert err.field == "clients.augment" and "vector data" in message and "none" in message
