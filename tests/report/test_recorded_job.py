"""RecordedJob: the job a result file records, read into typed fields."""

import pytest

from repens.core.errors import DataFileError
from repens.results.files import RecordedJob


def test_a_recorded_job_keeps_the_fields_the_reports_read_and_nothing_else():
    job = {"dataset": "fashionmnist", "method": "de", "seed": 38, "steps": 50000, "prior_std": 1.0}
    recorded = RecordedJob.read(job, "m.json", "an image job's metrics file", ("dataset", "method", "seed"))
    assert (recorded.dataset, recorded.method, recorded.seed, recorded.steps) == ("fashionmnist", "de", 38, 50000)
    assert recorded.scale is None and recorded.lr is None  # not in the file: None, never a guess
    assert not hasattr(recorded, "prior_std")


@pytest.mark.parametrize("job", [{"dataset": "boston"}, ["dataset", "method"], None])
def test_a_job_without_the_required_keys_names_the_file(job):
    with pytest.raises(DataFileError) as err:
        RecordedJob.read(
            job, "results/uci/boston/de/seed42/metrics.json", "a UCI job's metrics file", ("dataset", "method")
        )
    message = str(err.value)
    assert message.startswith("results/uci/boston/de/seed42/metrics.json: not a UCI job's metrics file")
    assert "dataset, method" in message and "\n" not in message
