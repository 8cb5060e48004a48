//! Fault injection for fleetbus meshes. Empty until the chaos issue: it exists
//! now so that the workspace layout in ARCHITECTURE.md is true from the start.
