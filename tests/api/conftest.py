from __future__ import annotations

import pytest

from tests.api.kubehelpers import install_crds
from tests.testenv.kube import ControlPlane


@pytest.fixture(scope="session")
def belay_crds(kube: ControlPlane) -> ControlPlane:
    install_crds(kube)
    return kube
