import Foundation
import ODataCore
import ODataServer
import Testing
@testable import OfflineOData

/// Issue 20, items 3–5: progress as SAP's SDK reports it — its exact English texts, every step
/// in all 30 languages, step numbers that never go back, and SAP's delegate shape.
@Suite struct ProgressParityTests {
    /// SPEC §8's table: each step with sample parameters and the exact English text.
    static let english: [(OfflineODataProgressStep, [String: String], String)] = [
        (.buildingEntityStore, [:], "Building the entity store"),
        (.creatingBootStrapDatabase, [:], "Creating bootstrap database"),
        (.creatingRequestQueueDatabase, [:], "Creating request queue database"),
        (.downloadingEntityStore, ["receivedBytes": "10", "totalBytes": "20"], "Downloading entity store. Received 10 of 20 bytes"),
        (.erasingExpiredRequests, [:], "Erasing expired requests"),
        (.loadingMetadata, [:], "Loading metadata"),
        (.performingRequestQueueMerge, [:], "Performing request queue optimizer"),
        (.performingTransactionMerge, [:], "Performing transaction builder"),
        (.performingCreateDeleteMerge, [:], "Performing undo local creation optimizer"),
        (.processingDefiningQueries, ["name": "Orders", "url": "/Orders"], "Processing defining queries Orders using /Orders"),
        (.processingRequests, ["number": "3", "count": "8"], "Processing requests. Processing modification request 3 of 8"),
        (.reapplyingChanges, [:], "Reapplying changes"),
        (.analyzingReceivedData, [:], "Receiving data from the client"),
        (.receivingDataFromServer, ["receivedBytes": "512"], "Receiving data from the server. Received 512 bytes"),
        (.removingDeletedRelationships, [:], "Removing deleted relationships"),
        (.removingRemoveAfterUploadRequests, [:], "Removing RemoveAfterUpload requests"),
        (.sendingDataToServer, ["sentBytes": "64"], "Sending data to the server. Sent 64 bytes"),
        (.sendingEntityStoreDatabase, [:], "Sending entity store database."),
        (.sendingRequestQueueDatabase, [:], "Sending request queue database."),
        (.uploadPreprocessing, [:], "Pre-processing requests before uploading"),
        (.waitingForDownload, [:], "Waiting for download"),
    ]

    @Test func englishTextsAreExactlySAPs() {
        #expect(Set(Self.english.map(\.0)) == Set(OfflineODataProgressStep.allCases))
        for (step, parameters, text) in Self.english {
            let message = ProgressMessages.shared.message(step: step, number: 2, total: 5, parameters: parameters, language: "en")
            #expect(message == "Performing step 2 of 5 : " + text, "\(step)")
        }
    }

    @Test func everyLanguageWordsEveryStepWithItsParameters() {
        let messages = ProgressMessages.shared
        #expect(messages.availableLanguages.count == 30)
        for language in messages.availableLanguages {
            let steps = messages.languages[language]?.steps ?? [:]
            for (step, parameters, _) in Self.english {
                #expect(steps[step.rawValue] != nil, "\(language) has no text for \(step)")
                let text = messages.message(step: step, number: 2, total: 5, parameters: parameters, language: language)
                for value in parameters.values { #expect(text.contains(value), "\(language) \(step): \(text)") }
                #expect(!text.contains("{"), "\(language) \(step): \(text)")
            }
        }
    }

    @Test(arguments: [1, 2, 5], [false, true])
    func stepNumbersNeverGoBackwards(definingQueries: Int, v2: Bool) async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        let all = [OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners"),
                   OfflineODataDefiningQuery(name: "Orders", query: "SalesOrders?$expand=Items"),
                   OfflineODataDefiningQuery(name: "Contacts", query: "Contacts"),
                   OfflineODataDefiningQuery(name: "Products", query: "Products"),
                   OfflineODataDefiningQuery(name: "Categories", query: "ProductCategories")]
        let recorder = Recorder()
        let provider = try await fixture.provider(v2: v2, queries: Array(all.prefix(definingQueries)), delegate: recorder)
        try await provider.open()
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"1"}"#.utf8))
        try await provider.upload()
        try await provider.download()
        for operation in [OfflineODataOperation.open, .upload, .download] {
            let updates = recorder.progress.filter { $0.operation == operation }
            #expect(!updates.isEmpty, "\(operation)")
            for (earlier, later) in zip(updates, updates.dropFirst()) {
                #expect(later.stepNumber >= earlier.stepNumber, "\(operation): \(earlier.step) \(earlier.stepNumber) → \(later.step) \(later.stepNumber)")
                #expect(later.totalSteps >= earlier.totalSteps, "\(operation)")
            }
            #expect(updates.allSatisfy { $0.stepNumber >= 1 && $0.stepNumber <= $0.totalSteps }, "\(operation)")
            #expect(updates.allSatisfy { $0.message.hasPrefix("Performing step \($0.stepNumber) of \($0.totalSteps) : ") })
        }
        #expect(recorder.progress.filter { $0.operation == .open && $0.step == .processingDefiningQueries }.count == definingQueries)
    }

    /// A delegate written for SAP's SDK: one method per operation, the provider passed in.
    final class SAPStyleDelegate: OfflineODataDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private var updates: [(String, OfflineODataOperationProgress)] = []
        private var failed: [OfflineODataFailedRequest] = []
        var received: [(String, OfflineODataOperationProgress)] { lock.withLock { updates } }
        var failures: [OfflineODataFailedRequest] { lock.withLock { failed } }
        func offlineODataProvider(_ provider: OfflineODataProvider, didUpdateOpenProgress progress: OfflineODataOperationProgress) {
            lock.withLock { updates.append(("open", progress)) }
        }
        func offlineODataProvider(_ provider: OfflineODataProvider, didUpdateDownloadProgress progress: OfflineODataOperationProgress) {
            lock.withLock { updates.append(("download", progress)) }
        }
        func offlineODataProvider(_ provider: OfflineODataProvider, didUpdateUploadProgress progress: OfflineODataOperationProgress) {
            lock.withLock { updates.append(("upload", progress)) }
        }
        func offlineODataProvider(_ provider: OfflineODataProvider, requestDidFail request: OfflineODataFailedRequest) {
            lock.withLock { failed.append(request) }
        }
    }

    @Test(arguments: [false, true])
    func aDelegateInSAPsShapeGetsEveryUpdate(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let delegate = SAPStyleDelegate()
        let provider = try await fixture.provider(v2: v2, delegate: delegate)
        try await provider.open()
        _ = try await provider.execute(method: "PATCH", url: "SalesOrders('SO2')", body: Array(#"{"Currency":"USD"}"#.utf8))
        await fixture.server.service.faults.set([FaultRule(urlContains: "SalesOrders('SO2')", status: 400, code: "OrderLocked",
                                                           message: "Order is locked", times: 1)])
        try await provider.upload()
        try await provider.download()
        let received = delegate.received
        #expect(Set(received.map(\.0)) == ["open", "download", "upload"])
        let defining = try #require(received.first { $0.0 == "open" && $0.1.step == .processingDefiningQueries }?.1)
        #expect(defining.parameters == ["Partners", "/BusinessPartners"])
        #expect(defining.defaultMessage == "Performing step \(defining.currentStepNumber) of \(defining.totalNumberOfSteps) : "
                + "Processing defining queries Partners using /BusinessPartners")
        let processing = try #require(received.first { $0.0 == "upload" && $0.1.step == .processingRequests }?.1)
        #expect(processing.parameters == ["1", "1"])
        #expect(received.allSatisfy { $0.1.lastUpdated.timeIntervalSinceNow < 60 })
        #expect(delegate.failures.map(\.code) == ["OrderLocked"])
    }
}
