import CRawSQLCipher
import Foundation
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData

/// `serve FOLDER SCALE`: the backend (the sales sample without change tracking) in this
/// process, which prints its V4 root and ends with its parent.
/// `memory POSTGRES_URL SCALE`: starts that backend as a child, then a gateway here, and
/// measures this process's peak resident memory while the gateway's first refresh of
/// `SalesOrders` reads every order into PostgreSQL.
func gatewayMemory(_ arguments: [String]) async throws {
    func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("GatewayRatio: \(message)\n".utf8))
        exit(1)
    }
    if arguments.first == "serve" {
        guard arguments.count == 3, let scale = Int(arguments[2]) else { fail("usage: serve FOLDER SCALE") }
        raw_end_with_parent()
        let backend = try await EmbeddedServer.sales(
            at: URL(fileURLWithPath: arguments[1]).appendingPathComponent("backend.sqlite").path, scale: scale,
            pageSize: 1000
        ) { $0.tracksChanges = false }
        FileHandle.standardOutput.write(Data((backend.v4Root.absoluteString + "\n").utf8))
        while true { try await Task.sleep(nanoseconds: 1_000_000_000) }
    }
    guard arguments.count == 3, let scale = Int(arguments[2]) else { fail("usage: memory POSTGRES_URL SCALE") }
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-gwmem-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: folder) }
    let child = Process()
    child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
    child.arguments = ["serve", folder.path, "\(scale)"]
    let pipe = Pipe()
    child.standardOutput = pipe
    let loading = ContinuousClock.now
    try child.run()
    defer { child.terminate() }
    var line = Data()
    while !line.contains(UInt8(ascii: "\n")) {
        let byte = pipe.fileHandleForReading.readData(ofLength: 1)
        guard !byte.isEmpty else { fail("the backend process ended early") }
        line.append(byte)
    }
    let root = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    print(
        "GatewayRatio memory: sales scale \(scale), backend (no delta links) in a child process, "
            + "loaded in \(ContinuousClock.now - loading)")

    var configuration = GatewayConfiguration(backends: [GatewayBackend(url: root)])
    configuration.pageSize = 1000
    let gateway = try await RunningGateway.start(configuration: configuration, postgresURL: arguments[1])
    let transport = DefaultTransport.make()
    var headers = HTTPHeaders()
    headers["Accept"] = "application/json"
    // The gateway's model and credential check come first, so that the peak below is the refresh's.
    let probe = try await transport.send(
        TransportRequest(method: "GET", url: gateway.root.absoluteString + "SalesOrders?$top=1", headers: headers),
        timeout: 60)
    guard probe.status == 200 else { fail("the gateway answered \(probe.status) to an online read") }
    let before = residentMiB("VmRSS")
    resetPeak()
    headers["Prefer"] = "odata.track-changes, odata.maxpagesize=100"
    let started = ContinuousClock.now
    let first = try await transport.send(
        TransportRequest(method: "GET", url: gateway.root.absoluteString + "SalesOrders", headers: headers),
        timeout: 3600)
    let elapsed = ContinuousClock.now - started
    let peak = residentMiB("VmHWM")
    guard first.status == 200 else { fail("the tracked read answered \(first.status)") }
    let count = try await transport.send(
        TransportRequest(method: "GET", url: root + "SalesOrders/$count", headers: HTTPHeaders()), timeout: 60)
    let orders = String(decoding: count.body, as: UTF8.self)
    print("first refresh of SalesOrders: \(orders) rows in \(elapsed)")
    print(
        String(
            format: "gateway process: %.1f MiB resident before, peak %.1f MiB during the refresh (+%.1f MiB)",
            before, peak, peak - before))
    await gateway.stop()
}

/// A line of `/proc/self/status` in MiB (`VmRSS` now, `VmHWM` the peak since ``resetPeak()``).
func residentMiB(_ field: String) -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }),
        let kib = Double(line.split(separator: " ").dropFirst().first ?? "")
    else { return -1 }
    return kib / 1024
}

/// Starts a new peak for `VmHWM` (`clear_refs` 5).
func resetPeak() {
    guard let file = FileHandle(forWritingAtPath: "/proc/self/clear_refs") else { return }
    file.write(Data("5".utf8))
    try? file.close()
}
