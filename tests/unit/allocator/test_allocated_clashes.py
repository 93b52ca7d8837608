"""AllocatedDevices.clashes: what a decided allocation may not be written over."""

from __future__ import annotations

from operators.allocator.allocated import AllocatedDevices, UsedDevice

A = ("gpu.example.com", "n1", "dev-0")
B = ("gpu.example.com", "n1", "dev-1")


def test_an_exclusive_device_in_use_clashes_and_a_free_one_does_not() -> None:
    used = AllocatedDevices.of([UsedDevice(A)])
    assert used.clashes([UsedDevice(A)]) == [A]
    assert used.clashes([UsedDevice(B)]) == []


def test_one_device_twice_in_the_new_allocations_clashes() -> None:
    assert AllocatedDevices().clashes([UsedDevice(A), UsedDevice(A)]) == [A]


def test_shares_clash_only_with_exclusive_use_or_their_own_share_id() -> None:
    used = AllocatedDevices.of([UsedDevice(A, share_id="s1")])
    assert used.clashes([UsedDevice(A, share_id="s2")]) == []
    assert used.clashes([UsedDevice(A, share_id="s1")]) == [A]
    assert used.clashes([UsedDevice(A)]) == [A]  # exclusive over a shared device
    assert AllocatedDevices.of([UsedDevice(B)]).clashes([UsedDevice(B, share_id="s3")]) == [B]


def test_admin_access_clashes_with_nothing() -> None:
    used = AllocatedDevices.of([UsedDevice(A)])
    assert used.clashes([UsedDevice(A, admin_access=True)]) == []
    assert AllocatedDevices.of([UsedDevice(A, admin_access=True)]).clashes([UsedDevice(A)]) == []
