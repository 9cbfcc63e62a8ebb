import ArgumentParser
struct URLCommand: ParsableCommand { static let configuration = CommandConfiguration(commandName: "url") }
