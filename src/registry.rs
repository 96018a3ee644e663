//! Per-agent registries of loaded tools and their revision counters.
