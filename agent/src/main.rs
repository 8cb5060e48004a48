fn main() {
    eprintln!("fleetbus-agent: not yet implemented");
    std::process::exit(2);
}
