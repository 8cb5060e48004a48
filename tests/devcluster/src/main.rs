fn main() {
    eprintln!("fleetbus-devcluster: not yet implemented");
    std::process::exit(2);
}
