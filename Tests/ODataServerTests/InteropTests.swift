import Foundation
import Testing
@testable import ODataServer

/// Runs SAP's pyodata (a V2 client from PyPI that nobody here wrote) against the reference
/// service. The test creates a virtual environment under `.build/interop-venv` on first use.
@Suite(.serialized) struct InteropTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func run(_ executable: String, _ arguments: [String]) throws -> (Int32, String, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
    }

    /// The venv's python, creating the venv and installing pyodata if needed.
    static func python() throws -> String {
        let venv = repository.appendingPathComponent(".build/interop-venv")
        let python = venv.appendingPathComponent("bin/python").path
        if FileManager.default.isExecutableFile(atPath: python),
           (try? run(python, ["-c", "import pyodata, requests"]).0) == 0 {
            return python
        }
        let (created, _, createError) = try run("/usr/bin/env", ["python3", "-m", "venv", venv.path])
        guard created == 0 else { throw Failure(message: "cannot create a venv: \(createError)") }
        let (installed, _, installError) = try run(venv.appendingPathComponent("bin/pip").path, ["install", "-q", "pyodata==1.12.1", "requests"])
        guard installed == 0 else { throw Failure(message: "cannot install pyodata: \(installError)") }
        return python
    }

    struct Failure: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    @Test func pyodataAgainstTheV2Root() async throws {
        let python = try Self.python()
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        let script = Self.repository.appendingPathComponent("Tests/Interop/pyodata_client.py").path
        let running = try await EmbeddedServer.start(service)
        let (status, output, errors) = try Self.run(python, [script, running.v2Root.absoluteString])
        await running.stop()
        #expect(status == 0, "pyodata failed: \(errors)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any], "output: \(output) \(errors)")
        #expect((json["entity_sets"] as? [String])?.contains("SalesOrders") == true)
        #expect(json["filtered_orders"] as? [String] == ["SO18", "SO17", "SO16"])
        #expect(json["inline_count"] as? Int == 10)
        #expect((json["expanded_items"] as? Int ?? 0) >= 1)
        #expect(json["partner_name"] as? String == "Company 2")
        #expect(json["partner_city"] as? String == "Boston")
        #expect((json["partner_contacts"] as? [String])?.count == 2)
        #expect(json["product_count"] as? Int == 20)
        #expect(json["created"] as? String == "PY1")
        #expect(json["updated"] as? String == "Renamed by pyodata")
        #expect(json["deleted"] as? Bool == true)
        #expect(json["batch_created"] as? [String] == ["PY2", "PY3"])
        #expect(json["function_categories"] as? [String] == ["C3"])
    }
}

extension InteropTests {
    @Test func curlAgainstTheV4Root() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        let script = Self.repository.appendingPathComponent("Tests/Interop/curl_v4.sh").path
        let running = try await EmbeddedServer.start(service)
        let (status, output, errors) = try Self.run("/usr/bin/env", ["bash", script, running.v4Root.absoluteString])
        await running.stop()
        #expect(status == 0, "curl checks failed: \(errors)")
        #expect(output.contains("15 passed, 0 failed"), "\(output) \(errors)")
    }
}
