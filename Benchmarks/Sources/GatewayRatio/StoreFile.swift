import CRawSQLCipher
import Foundation
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData

/// Issue 37: a first open of SalesOrders through a store file the gateway built, against the
/// paged first open of the same data through the same gateway, both keyed, each device alone
/// in a process of its own (its time and peak resident memory), the backend and the gateway in
/// two more:
///
///   ./.build/release/GatewayRatio file POSTGRES_URL SCALE
///
/// The gateway reuses the file of shared data (`prepopulate_offline_db=SHARED-ONLY`) and answers
/// from its last refresh (interval an hour): a warm-up device, not measured, makes both.
func storeFileBenchmark(_ arguments: [String]) async throws {
    func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("GatewayRatio: \(message)\n".utf8))
        exit(1)
    }
    switch arguments.first {
    case "gateway-serve":
        guard arguments.count == 3 else { fail("usage: gateway-serve BACKEND_ROOT POSTGRES_URL") }
        raw_end_with_parent()
        var backend = GatewayBackend(url: arguments[1])
        backend.prepopulate = .sharedOnly
        backend.sharedQueries = ["SalesOrders"]
        var configuration = GatewayConfiguration(backends: [backend])
        configuration.pageSize = 1000
        configuration.refreshInterval = 3600
        let gateway = try await RunningGateway.start(configuration: configuration, postgresURL: arguments[2])
        FileHandle.standardOutput.write(Data((gateway.root.absoluteString + "\n").utf8))
        while true { try await Task.sleep(nanoseconds: 1_000_000_000) }
    case "client":
        guard arguments.count == 5 else { fail("usage: client ROOT FOLDER NAME ACCEPTS") }
        guard let root = URL(string: arguments[1]) else { fail("\(arguments[1]) is not a URL") }
        var parameters = OfflineODataParameters()
        parameters.storePath = URL(fileURLWithPath: arguments[2])
        parameters.storeName = arguments[3]
        parameters.storeEncryptionKey = "benchmark-key"
        parameters.acceptsServerBuiltStore = arguments[4] == "file"
        let provider = OfflineODataProvider(serviceRoot: root, parameters: parameters)
        try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "SalesOrders", query: "SalesOrders"))
        if ProcessInfo.processInfo.environment["GATEWAYRATIO_PHASES"] != nil {
            FileHandle.standardError.write(Data("before open: \(residentMiB("VmRSS")) MiB\n".utf8))
        }
        resetPeak()
        let started = ContinuousClock.now
        try await provider.open()
        let parts = (ContinuousClock.now - started).components
        let seconds = Double(parts.seconds) + Double(parts.attoseconds) / 1e18
        // The open's peak (the count below reads every row through a reader's page cache).
        let peak = residentMiB("VmHWM")
        guard case .count(let rows) = try await provider.read("SalesOrders/$count") else { fail("no count") }
        await provider.close()
        print("\(seconds) \(peak) \(rows)")
        exit(0)
    default:
        break
    }
    guard arguments.count == 3, let scale = Int(arguments[2]) else { fail("usage: file POSTGRES_URL SCALE") }
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-gwfile-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: folder) }
    var children: [Process] = []
    defer { for child in children { child.terminate() } }
    /// Runs this program with `arguments`; its first line of output.
    func child(_ arguments: [String], waits: Bool) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        if !waits { children.append(process) }
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let byte = pipe.fileHandleForReading.readData(ofLength: 1)
            guard !byte.isEmpty else { fail("\(arguments.first ?? "") ended early") }
            line.append(byte)
        }
        if waits { process.waitUntilExit() }
        return String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
    let backendRoot = try child(["serve", folder.path, "\(scale)"], waits: false)
    let gatewayRoot = try child(["gateway-serve", backendRoot, arguments[1]], waits: false)
    print("GatewayRatio file: sales scale \(scale), backend, gateway and each device in processes of their own")
    func open(_ name: String, _ mode: String) throws -> (seconds: Double, peak: Double, rows: String) {
        let fields = try child(["client", gatewayRoot, folder.path, name, mode], waits: true).split(separator: " ")
        guard fields.count == 3, let seconds = Double(fields[0]), let peak = Double(fields[1]) else {
            fail("a device printed \(fields)")
        }
        return (seconds, peak, String(fields[2]))
    }
    let warm = try open("warmup", "file")
    print(String(format: "warm-up (refresh and file build on the gateway): %.3f s, %@ rows", warm.seconds, warm.rows))
    let paged = try open("paged", "paged")
    let filed = try open("filed", "file")
    let size =
        (try? FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent("filed.db").path))?[
            .size] as? NSNumber
    print(
        String(
            format: "paged first open: %.3f s, peak %.1f MiB, %@ rows", paged.seconds, paged.peak, paged.rows))
    print(
        String(
            format: "first open from the gateway's file: %.3f s, peak %.1f MiB, %@ rows, store %.1f MiB",
            filed.seconds, filed.peak, filed.rows, (size?.doubleValue ?? 0) / 1_048_576))
    print(String(format: "ratio (file ÷ paged): %.3fx", filed.seconds / paged.seconds))
}
