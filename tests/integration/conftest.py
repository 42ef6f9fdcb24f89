"""The integration tier's fixtures: the shared clusters each module may use.
What builds and inspects clusters is in `tests.integration.cluster_harness`."""

from __future__ import annotations

import pytest

from tests.clusters import TRN1, TRN1_X4, Cluster, SharedClusters


# Module-scoped, so module fixtures may use them; the tests sharing one run
# together (tests.clusters.order), so a module's value is never stale.
@pytest.fixture(scope="module")
def trn1_cluster(shared_clusters: SharedClusters) -> Cluster:
    """The shared two-partition mock trn1.32xlarge (`tests.clusters.TRN1`)."""
    return shared_clusters.get(TRN1)


@pytest.fixture(scope="module")
def trn1x4_cluster(shared_clusters: SharedClusters) -> Cluster:
    """The shared four-partition mock trn1.32xlarge (`tests.clusters.TRN1_X4`)."""
    return shared_clusters.get(TRN1_X4)
