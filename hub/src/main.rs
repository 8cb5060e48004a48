fn main() {
    eprintln!("fleetbus: not yet implemented");
    std::process::exit(2);
}
