"""Everything that talks to or runs tritonserver."""
