// The testbed's own sandbox image program (standard library only).
module dralloc.local/testbed/tools/pause

go 1.26.0
