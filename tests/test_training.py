"""Tests of notebook 09's modules: helpers.networks.datasets and training_cnns, and
helpers.experiments.training's short training run (the throughput's tests are in
test_training_throughput.py).

Fast: tiny batches, 16-pixel images and a few steps; the GPU checks are marked and skipped
without a GPU.
"""


import numpy as np
import pytest
import torch

import helpers  # noqa: F401  (decides the backend first)
from helpers.experiments import training
from helpers.networks import datasets, training_cnns


# ------------------------------------------------------------------------------ datasets


def test_lfw_arrays_are_the_documented_faces_and_non_faces():
    images, labels = datasets.lfw_arrays()
    assert images.shape == (200, 25, 25) and images.dtype == np.float32
    assert 0.0 <= images.min() and images.max() <= 1.0
    assert labels.dtype == np.int64
    assert (labels[:100] == 0).all() and (labels[100:] == 1).all()
    assert datasets.LFW_CLASSES[0] == "face"


def test_lfw_split_is_fixed_stratified_and_disjoint():
    train_idx, test_idx = datasets.lfw_split()
    again = datasets.lfw_split()
    assert np.array_equal(train_idx, again[0]) and np.array_equal(test_idx, again[1])
    assert len(train_idx) == 150 and len(test_idx) == 50
    assert not set(train_idx) & set(test_idx)
    assert sorted(np.concatenate([train_idx, test_idx])) == list(range(200))
    assert (test_idx < 100).sum() == 25  # 25 faces, 25 non-faces held out
    other = datasets.lfw_split(seed=1)
    assert not np.array_equal(test_idx, other[1])


def test_lfw_dataset_items_have_documented_shapes_dtypes_labels():
    train = datasets.LFWFaces("train")
    test = datasets.LFWFaces("test")
    assert (len(train), len(test)) == (150, 50)
    x, y = train[0]
    assert x.shape == (1, 25, 25) and x.dtype == torch.float32 and isinstance(y, int)
    assert np.bincount(train.labels).tolist() == [75, 75]
    assert np.bincount(test.labels).tolist() == [25, 25]
    assert train.name == "lfw_subset" and train.num_classes == 2
    big = datasets.LFWFaces("test", size=32, channels=3)
    x3, _ = big[3]
    assert x3.shape == (3, 32, 32) and torch.equal(x3[0], x3[2])
    batch_x, batch_y = next(iter(torch.utils.data.DataLoader(big, batch_size=8)))
    assert batch_x.shape == (8, 3, 32, 32) and batch_y.dtype == torch.int64


def test_augmentation_keeps_the_shape_and_is_seeded():
    plain = datasets.LFWFaces("train", size=32)
    aug = datasets.LFWFaces("train", size=32, augment=True, max_shift=3)
    torch.manual_seed(0)
    a = torch.stack([aug[i][0] for i in range(20)])
    torch.manual_seed(0)
    b = torch.stack([aug[i][0] for i in range(20)])
    p = torch.stack([plain[i][0] for i in range(20)])
    assert a.shape == p.shape == (20, 1, 32, 32)
    assert torch.equal(a, b)
    assert not torch.equal(a, p)


@pytest.mark.parametrize("n_out", [16, 32, 57])
def test_bilinear_matrix_matches_torch_interpolate(n_out, rng):
    img = rng.random((25, 25)).astype(np.float32)
    a = datasets.bilinear_matrix(25, n_out)
    want = torch.nn.functional.interpolate(torch.from_numpy(img)[None, None], size=(n_out, n_out),
                                           mode="bilinear", align_corners=False)[0, 0].numpy()
    print("matches torch (max abs. error < 1e-5):", np.abs(a @ img @ a.T - want).max() < 1e-5)
    assert np.abs(a @ img @ a.T - want).max() < 1e-5


@pytest.mark.parametrize("kwargs", [
    dict(split="validation"), dict(channels=2), dict(size=4), dict(size=32.0),
    dict(max_shift=-1), dict(test_fraction=1.0)])
def test_lfw_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        datasets.LFWFaces(**kwargs)


def test_make_rejects_unknown_names_and_cifar_is_never_downloaded_by_default(tmp_path):
    with pytest.raises(ValueError, match="name"):
        datasets.make("imagenet")
    with pytest.raises(datasets.DatasetUnavailable, match="download=True"):
        datasets.make("cifar10", root=tmp_path)
    with pytest.raises(ValueError, match="split"):
        datasets.cifar10("all", root=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing fetched


@pytest.mark.slow
def test_cifar10_wrapper_with_the_files_present(tmp_path, monkeypatch):
    # No download: torchvision's CIFAR10 is replaced by a stand-in holding 4 images, so the
    # wrapper's transforms and metadata are checked offline.
    import PIL.Image
    import torchvision.datasets

    class FakeCIFAR10:
        def __init__(self, root, train, transform, download):
            assert not download
            self.transform, self.targets = transform, [0, 1, 2, 9]

        def __len__(self):
            return 4

        def __getitem__(self, i):
            img = PIL.Image.fromarray(np.full((32, 32, 3), 40 * i, np.uint8))
            return self.transform(img), self.targets[i]

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    (tmp_path / "cifar-10-batches-py").mkdir()
    ds = datasets.make("cifar10", "test", root=tmp_path, augment=True, size=40)
    x, y = ds[3]
    assert ds.name == "cifar10" and ds.num_classes == 10 and ds.channels == 3
    assert x.shape == (3, 40, 40) and x.dtype == torch.float32 and y == 9
    assert ds.augment and "augmented" in ds.description


# ------------------------------------------------------------------------------ models


@pytest.mark.parametrize("name", list(training_cnns.MODELS))
@pytest.mark.parametrize("c, classes, size", [(1, 2, 25), (3, 10, 32)])
def test_models_accept_the_datasets_shapes(name, c, classes, size):
    net = training_cnns.build(name, c, classes, size)
    out = net(torch.randn(2, c, size, size))
    assert out.shape == (2, classes) and out.dtype == torch.float32
    assert training_cnns.weight_layers(net) == training_cnns.MODELS[name].depth


def test_resnet20_has_the_papers_size():
    net = training_cnns.build("resnet20", 3, 10, 32)
    assert training_cnns.weight_layers(net) == 20
    assert abs(training_cnns.parameter_count(net) - 0.27e6) < 0.005e6  # He et al. Table 6: 0.27M
    small = training_cnns.parameter_count(training_cnns.build("small", 3, 10, 32))
    vgg = training_cnns.parameter_count(training_cnns.build("vgg", 3, 10, 32))
    assert small < training_cnns.parameter_count(net) < vgg


def test_forward_flops_counts_convolutions_and_dense_layers():
    net = training_cnns.build("small", 3, 10, 32)
    by_hand = (2 * 32 * 32 * 32 * 3 * 9 + 2 * 16 * 16 * 32 * 32 * 9 + 2 * 8 * 8 * 64 * 32 * 9
               + 2 * 1024 * 64 + 2 * 64 * 10)
    assert training_cnns.forward_flops(net, 3, 32) == by_hand
    assert net.training  # its mode is restored
    resnet = training_cnns.forward_flops(training_cnns.build("resnet20", 3, 10, 32), 3, 32)
    assert 80e6 < resnet < 82e6  # about 41 million multiply-adds


def test_build_is_seeded():
    a, b = training_cnns.build("small", 1, 2, 25, seed=3), training_cnns.build("small", 1, 2, 25, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("args", [("alexnet", 3, 10, 32), ("small", 0, 10, 32),
                                  ("small", 3, 1, 32), ("small", 3, 10, 4), ("vgg", 3, 10, 8)])
def test_models_bad_arguments_raise(args):
    with pytest.raises(ValueError):
        training_cnns.build(*args)


# ------------------------------------------------------------------------------ training


def test_a_tiny_training_run_reduces_the_loss():
    res = training.train(epochs=3, batch_size=32, seed=0)
    assert res.dataset == "lfw_subset" and res.device.startswith("CPU")
    assert res.epoch_losses[-1] < res.epoch_losses[0]
    assert res.images == 3 * 4 * 32 and len(res.losses) == 12
    assert 0.0 <= res.test_accuracy <= 1.0


@pytest.mark.parametrize("seed", [0, 1])
def test_the_short_run_reaches_the_stated_accuracy(seed):
    res = training.train(seed=seed)
    assert res.reached(training.ACCURACY_THRESHOLD), res.test_accuracy


@pytest.mark.parametrize("kwargs", [dict(epochs=0), dict(batch_size=0), dict(lr=0.0),
                                    dict(device="tpu"), dict(model="alexnet")])
def test_train_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        training.train(**kwargs)
