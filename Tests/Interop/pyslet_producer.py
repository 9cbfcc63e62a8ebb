"""Runs pyslet's OData V2 server (PyPI pyslet==0.7.20170805) over its in-memory data store, as a third-party
producer for interop tests.

Usage: pyslet_producer.py PORT [PAGE_SIZE]
  PORT 0 picks a free port. PAGE_SIZE is the server-side page size (pyslet's default: 100); longer feeds end
  with a `__next` link. Listens on 127.0.0.1 only, prints one line `READY http://127.0.0.1:PORT/` (the OData
  service root) and serves until killed. A middleware records every request: `GET /_log` returns them as a
  JSON list, `POST /_log/clear` empties it (both are answered before pyslet sees the request).

The service (namespace Shop, default container ShopService) is defined by METADATA and seeded by
build_container() with 5 Customers, 12 Orders and 20 Items. Customer_Orders has no referential constraint (as
in many V2 services: the link is not a property), Order_Items has one (pyslet repeats it in $metadata but keeps
the link apart from the OrderID property). Clients supply the keys of new entities (if a
POST body has none, pyslet makes up a random one).

Patches (monkeypatched at runtime by apply_patches(); site-packages is never edited):
  1. csdl.EntityCollection.iterpage: without $top (or with $top > the server page size) every feed got a
     `__next` link, even the last page, so a client following next links never stopped. Now a next link is
     only produced when the store really has more entities.
  2. memds.EntityCollection/NavigationCollection.itervalues: $select was applied before $filter/$orderby, so
     filtering or ordering on an unselected property saw NULLs (`$filter=Amount gt 100M&$select=OrderID` gave
     an empty feed). Now filter and order run on whole entities and $select/$expand is applied last.
  3. core.BinaryExpression.evaluate_eq: `eq`/`ne` on two Edm.Boolean values raised "Illegal operands for eq"
     (HTTP 500), e.g. `substringof('x',Name) eq true`. Booleans are now compared.
  4. core.BinaryExpression.evaluate_relation: lt/le/gt/ge with a NULL String/DateTime/Guid operand compared
     None with a value, a TypeError (HTTP 500) on Python 3. A NULL operand now gives false, as pyslet already
     does for numbers.
  5. core.EntityCollection.calculate_order_key: $orderby on a property that is NULL in some entities sorted
     None against values, a TypeError (HTTP 500) on Python 3. NULLs now sort first (last with desc).
  6. core.parse_asp_dot_net_date: `/Date(1704067200000)/` (no offset) was read as 1 ms after 1970 because it
     took int(ticks[0]), the first character; negative ticks failed too. Rewritten with a regex.
  7. core.Entity.set_from_json_object: when updating an existing entity (PUT/MERGE) it set every property
     missing from the body to NULL, keys included, so MERGE (and a PUT body without the key) failed with
     "Entity with NULL key not allowed" (HTTP 500). Keys now always come from the URL, and only the
     properties present in the body are marked selected, so MERGE keeps the others and PUT (memds
     merge=False) resets them to their defaults.
  8. core.EntityCollection.get_next_page_location: the `__next` link dropped $top, so with $top larger than
     the page size a client following next links got the whole set. The link now carries the remaining $top.
  9. core.simple_value_to_json_str: Edm.DateTime was written as int(seconds * 1000), so float error turned
     e.g. .123 s into `/Date(...122)/`; milliseconds are now rounded.
 10. core.Entity.set_from_json_object: a navigation property sent as {"__deferred": {...}} (an entity read
     from the server and posted back) was taken for a deep insert and created an empty entity with a random
     key; such properties are now ignored. A deep insert written as {"results": [...]} (the V2 response
     shape) iterated the dict's keys and created one empty entity with a random key instead of the listed
     ones; it is now unwrapped to the plain array pyslet expects.
 11. server.Server.encode_pathinfo: on Python 3 WSGI's PATH_INFO is the URL's bytes decoded as latin-1, but
     pyslet treated it as text, so a non-ASCII key (`Customers('%C3%9C1')`) failed with a UnicodeEncodeError
     (HTTP 400). It is now turned back into bytes first.
 12. core.ODataURI.split_segment: key predicates were percent-decoded twice (the segment, then the literal),
     so a key with a non-ASCII character or an encoded '%' failed or changed. '%' is now escaped once more
     before the first decoding, which leaves quotes, commas and '=' as pyslet's key splitter expects.
"""
import datetime
import decimal
import io
import json
import re
import socketserver
import sys
import threading
import uuid
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from pyslet import iso8601 as iso
from pyslet import rfc2396 as uri
from pyslet.odata2 import core, csdl, memds
from pyslet.odata2 import metadata as edmx
from pyslet.odata2.server import Server


def boolean(value):
    result = csdl.EDMValue.from_type(csdl.SimpleType.Boolean)
    result.set_from_value(value)
    return result


def apply_patches():
    """Fixes pyslet 0.7.20170805 bugs listed under "Patches" in the module docstring (numbers match)."""
    iterpage = csdl.EntityCollection.iterpage

    def patched_iterpage(self, set_next=False):  # 1
        exhausted = []
        itervalues = self.itervalues

        def tracking():
            yield from itervalues()
            exhausted.append(True)
        self.itervalues = tracking  # an instance attribute shadows the method while this page is read
        try:
            yield from iterpage(self, set_next)
        finally:
            del self.itervalues
        if exhausted:
            self.nextSkiptoken = None
    csdl.EntityCollection.iterpage = patched_iterpage

    def collection_itervalues(self):  # 2
        entities = self.entity_store.generate_entities()  # all properties, not just $select-ed ones
        return self.expand_entities(self.order_entities(self.filter_entities(entities)))
    memds.EntityCollection.itervalues = collection_itervalues

    def navigation_itervalues(self):  # 2, same for Customers('C1')/Orders
        return self.expand_entities(self.order_entities(self.filter_entities(self.entity_generator())))
    memds.NavigationCollection.itervalues = navigation_itervalues

    evaluate_eq = core.BinaryExpression.evaluate_eq

    def patched_eq(self, lvalue, rvalue):  # 3
        if isinstance(lvalue, csdl.BooleanValue) and isinstance(rvalue, csdl.BooleanValue):
            return boolean(lvalue.value == rvalue.value)
        return evaluate_eq(self, lvalue, rvalue)
    core.BinaryExpression.evaluate_eq = patched_eq  # evaluate_ne calls this
    core.BinaryExpression.EvalMethod[core.Operator.eq] = patched_eq  # the operator dispatch table

    evaluate_relation = core.BinaryExpression.evaluate_relation

    def patched_relation(self, lvalue, rvalue, relation):  # 4
        if (isinstance(lvalue, csdl.SimpleValue) and isinstance(rvalue, csdl.SimpleValue)
                and (lvalue.value is None or rvalue.value is None)):
            return boolean(False)
        return evaluate_relation(self, lvalue, rvalue, relation)
    core.BinaryExpression.evaluate_relation = patched_relation

    def order_key(self, entity, order_object):  # 5
        value = order_object.evaluate(entity).value
        return (value is not None, value)
    core.EntityCollection.calculate_order_key = order_key

    asp_date = re.compile(r"/Date\((-?\d+)(?:([+-])(\d+))?\)/$")

    def parse_asp_dot_net_date(src):  # 6: returns a TimePoint, in UTC when there is no offset
        match = asp_date.match(src)
        if not match:
            raise ValueError(src)
        ticks, sign, offset = match.groups()
        time, overflow = iso.Time().offset(seconds=int(ticks) / 1000.0)
        zdir = 0 if not sign else (1 if sign == "+" else -1)
        offset = int(offset or 0)  # minutes
        time = time.with_zone(zdir, offset // 60, offset % 60)
        return iso.TimePoint(date=iso.Date(absolute_day=core.BASE_DAY + overflow), time=time)
    core.parse_asp_dot_net_date = parse_asp_dot_net_date

    set_from_json_object = core.Entity.set_from_json_object

    def patched_set_from_json(self, obj, entity_resolver=None, for_update=False):  # 7, 10
        if isinstance(obj, dict):
            obj = {name: value.get("results", value) if isinstance(value, dict) else value
                   for name, value in obj.items() if not (isinstance(value, dict) and "__deferred" in value)}
        if not self.exists:
            return set_from_json_object(self, obj, entity_resolver, for_update)
        keys = {name: self[name].value for name in self.entity_set.keys}
        set_from_json_object(self, obj, entity_resolver, for_update)
        for name, value in keys.items():
            self[name].set_from_value(value)
        self.selected = set(keys) | {name for name in self.data_keys() if name in obj}
    core.Entity.set_from_json_object = patched_set_from_json

    next_page = core.EntityCollection.get_next_page_location

    def patched_next_page(self):  # 8: a next link only exists when $top is absent or above the page size
        link = next_page(self)
        if link is not None and self.top is not None:
            link = uri.URI.from_octets("%s&$top=%d" % (link, self.top - self.topmax))
        return link
    core.EntityCollection.get_next_page_location = patched_next_page

    to_json = core.simple_value_to_json_str

    def patched_to_json(value):  # 9
        if isinstance(value, csdl.DateTimeValue) and value:
            date, time = value.value.date, value.value.time
            ms = round(time.get_total_seconds() * 1000)
            return '"\\/Date(%i)\\/"' % ((date.get_absolute_day() - core.BASE_DAY) * core.TICKS_PER_DAY + ms)
        return to_json(value)
    core.simple_value_to_json_str = patched_to_json

    encode_pathinfo = Server.encode_pathinfo.__func__

    def patched_encode_pathinfo(cls, pathinfo):  # 11
        if isinstance(pathinfo, str):
            pathinfo = pathinfo.encode("latin-1")
        return encode_pathinfo(cls, pathinfo)
    Server.encode_pathinfo = classmethod(patched_encode_pathinfo)

    split_segment = core.ODataURI.split_segment.__func__

    def patched_split_segment(cls, segment):  # 12
        return split_segment(cls, segment.replace("%", "%25"))
    core.ODataURI.split_segment = classmethod(patched_split_segment)


METADATA = """<?xml version="1.0" encoding="utf-8"?>
<edmx:Edmx Version="1.0" xmlns:edmx="http://schemas.microsoft.com/ado/2007/06/edmx"
    xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata">
  <edmx:DataServices m:DataServiceVersion="2.0">
    <Schema Namespace="Shop" xmlns="http://schemas.microsoft.com/ado/2008/09/edm">
      <EntityType Name="Customer">
        <Key><PropertyRef Name="CustomerID"/></Key>
        <Property Name="CustomerID" Type="Edm.String" Nullable="false" MaxLength="20"/>
        <Property Name="Name" Type="Edm.String"/>
        <Property Name="Country" Type="Edm.String"/>
        <Property Name="Created" Type="Edm.DateTime"/>
        <NavigationProperty Name="Orders" Relationship="Shop.Customer_Orders" FromRole="Customer" ToRole="Order"/>
      </EntityType>
      <EntityType Name="Order">
        <Key><PropertyRef Name="OrderID"/></Key>
        <Property Name="OrderID" Type="Edm.Int32" Nullable="false"/>
        <Property Name="CustomerID" Type="Edm.String" MaxLength="20"/>
        <Property Name="Amount" Type="Edm.Decimal" Precision="10" Scale="2"/>
        <Property Name="Quantity" Type="Edm.Int64"/>
        <Property Name="Token" Type="Edm.Guid"/>
        <Property Name="OrderDate" Type="Edm.DateTime"/>
        <NavigationProperty Name="Customer" Relationship="Shop.Customer_Orders" FromRole="Order" ToRole="Customer"/>
        <NavigationProperty Name="Items" Relationship="Shop.Order_Items" FromRole="Order" ToRole="Item"/>
      </EntityType>
      <EntityType Name="Item">
        <Key><PropertyRef Name="ItemID"/></Key>
        <Property Name="ItemID" Type="Edm.Int32" Nullable="false"/>
        <Property Name="OrderID" Type="Edm.Int32"/>
        <Property Name="Product" Type="Edm.String"/>
        <Property Name="Price" Type="Edm.Decimal" Precision="10" Scale="2"/>
        <NavigationProperty Name="Order" Relationship="Shop.Order_Items" FromRole="Item" ToRole="Order"/>
      </EntityType>
      <Association Name="Customer_Orders">
        <End Role="Customer" Type="Shop.Customer" Multiplicity="0..1"/>
        <End Role="Order" Type="Shop.Order" Multiplicity="*"/>
      </Association>
      <Association Name="Order_Items">
        <End Role="Order" Type="Shop.Order" Multiplicity="0..1"/>
        <End Role="Item" Type="Shop.Item" Multiplicity="*"/>
        <ReferentialConstraint>
          <Principal Role="Order"><PropertyRef Name="OrderID"/></Principal>
          <Dependent Role="Item"><PropertyRef Name="OrderID"/></Dependent>
        </ReferentialConstraint>
      </Association>
      <EntityContainer Name="ShopService" m:IsDefaultEntityContainer="true">
        <EntitySet Name="Customers" EntityType="Shop.Customer"/>
        <EntitySet Name="Orders" EntityType="Shop.Order"/>
        <EntitySet Name="Items" EntityType="Shop.Item"/>
        <AssociationSet Name="Customer_Orders" Association="Shop.Customer_Orders">
          <End Role="Customer" EntitySet="Customers"/>
          <End Role="Order" EntitySet="Orders"/>
        </AssociationSet>
        <AssociationSet Name="Order_Items" Association="Shop.Order_Items">
          <End Role="Order" EntitySet="Orders"/>
          <End Role="Item" EntitySet="Items"/>
        </AssociationSet>
      </EntityContainer>
    </Schema>
  </edmx:DataServices>
</edmx:Edmx>
"""

D = datetime.datetime
CUSTOMERS = [  # CustomerID, Name, Country, Created
    ("C1", "Alfreds Futterkiste", "Germany", D(2020, 1, 15, 9, 30)),
    ("C2", "Ana Trujillo", "Mexico", D(2020, 6, 5, 14, 0)),
    ("C3", "Around the Horn", "UK", D(2021, 3, 22, 8, 15)),
    ("C4", "Berglunds snabbköp", "Sweden", D(2022, 11, 5, 17, 45)),
    ("C5", "Blondel père et fils", "France", D(2023, 7, 1, 0, 0)),
]
ORDERS = [  # OrderID, CustomerID, Amount, Quantity, OrderDate
    (1, "C1", "45.50", 3, D(2020, 2, 5, 10, 0)),
    (2, "C1", "150.00", 12, D(2020, 8, 17, 11, 30)),
    (3, "C1", "99.99", 1, D(2021, 1, 5, 9, 0)),
    (4, "C2", "250.75", 20, D(2021, 4, 10, 15, 20)),
    (5, "C2", "12.00", 2, D(2021, 12, 31, 23, 59)),
    (6, "C3", "100.00", 5, D(2022, 3, 5, 8, 0)),
    (7, "C3", "100.01", 7, D(2022, 6, 18, 12, 0)),
    (8, "C3", "75.25", 4, D(2022, 9, 25, 16, 45)),
    (9, "C4", "500.00", 50, D(2023, 1, 5, 7, 30)),
    (10, "C4", "33.33", 3, D(2023, 5, 20, 13, 10)),
    (11, "C5", "120.40", 12, D(2024, 2, 29, 18, 0)),
    (12, "C5", "8.99", 1, D(2024, 10, 5, 9, 5)),
]
ITEMS = [  # ItemID, OrderID, Product, Price
    (1, 1, "Chai", "18.00"), (2, 1, "Chang", "27.50"), (3, 2, "Aniseed Syrup", "150.00"),
    (4, 3, "Chef Anton's Cajun Seasoning", "99.99"), (5, 4, "Grandma's Boysenberry Spread", "125.00"),
    (6, 4, "Uncle Bob's Organic Dried Pears", "125.75"), (7, 5, "Northwoods Cranberry Sauce", "12.00"),
    (8, 6, "Mishi Kobe Niku", "60.00"), (9, 6, "Ikura", "40.00"), (10, 7, "Queso Cabrales", "100.01"),
    (11, 8, "Queso Manchego La Pastora", "75.25"), (12, 9, "Konbu", "200.00"), (13, 9, "Tofu", "150.00"),
    (14, 9, "Genen Shouyu", "150.00"), (15, 10, "Pavlova", "33.33"), (16, 11, "Alice Mutton", "60.20"),
    (17, 11, "Carnarvon Tigers", "60.20"), (18, 12, "Teatime Chocolate Biscuits", "8.99"),
    (19, 2, "Chai", "0.00"), (20, 7, "Tofu", "0.00"),
]


def token(order_id):
    """A deterministic Guid per order."""
    return uuid.UUID("00000000-0000-4000-8000-%012d" % order_id)


def build_container():
    doc = edmx.Document()
    doc.read(src=METADATA.encode("utf-8"))
    container = doc.root.DataServices["Shop.ShopService"]
    memds.InMemoryEntityContainer(container)
    with container["Customers"].open() as coll:
        for cid, name, country, created in CUSTOMERS:
            e = coll.new_entity()
            e["CustomerID"].set_from_value(cid)
            e["Name"].set_from_value(name)
            e["Country"].set_from_value(country)
            e["Created"].set_from_value(created)
            coll.insert_entity(e)
    with container["Orders"].open() as coll:
        for oid, cid, amount, qty, date in ORDERS:
            e = coll.new_entity()
            e["OrderID"].set_from_value(oid)
            e["CustomerID"].set_from_value(cid)
            e["Amount"].set_from_value(decimal.Decimal(amount))
            e["Quantity"].set_from_value(qty)
            e["Token"].set_from_value(token(oid))
            e["OrderDate"].set_from_value(date)
            e["Customer"].bind_entity(cid)
            coll.insert_entity(e)
    with container["Items"].open() as coll:
        for iid, oid, product, price in ITEMS:
            e = coll.new_entity()
            e["ItemID"].set_from_value(iid)
            e["OrderID"].set_from_value(oid)
            e["Product"].set_from_value(product)
            e["Price"].set_from_value(decimal.Decimal(price))
            e["Order"].bind_entity(oid)
            coll.insert_entity(e)
    return doc


class RequestLog:
    """WSGI middleware recording every request; serves GET /_log and POST /_log/clear itself.

    An entry is {"method", "path" (path and query exactly as on the request line, still percent-encoded),
    "headers" (those in HEADERS that the client sent), "body" (POST/PUT/PATCH/MERGE only, as text),
    "status" (the response's status code, once known)}."""
    HEADERS = ("Content-Type", "Accept", "If-Match", "If-None-Match", "X-HTTP-Method", "DataServiceVersion",
               "MaxDataServiceVersion")

    def __init__(self, app):
        self.app, self.entries, self.lock = app, [], threading.Lock()

    def __call__(self, environ, start_response):
        path, method = environ.get("PATH_INFO", ""), environ["REQUEST_METHOD"].upper()
        if path in ("/_log", "/_log/clear"):
            with self.lock:
                if path == "/_log/clear" and method == "POST":
                    self.entries.clear()
                body = json.dumps(self.entries).encode("utf-8")
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        sent = environ["producer.headers"]  # see Handler.get_environ
        entry = {"method": method, "path": environ["producer.target"],
                 "headers": {name: sent[name] for name in self.HEADERS if name in sent}, "status": None}
        if method in ("POST", "PUT", "PATCH", "MERGE"):
            # Read the body once for the log and hand the server a fresh stream with the same bytes.
            length = int(environ.get("CONTENT_LENGTH") or 0)
            data = environ["wsgi.input"].read(length) if length else b""
            entry["body"] = data.decode("utf-8", "replace")
            environ["wsgi.input"] = io.BytesIO(data)
        with self.lock:
            self.entries.append(entry)

        def recording_start_response(status, headers, exc_info=None):
            entry["status"] = int(status.split()[0])
            return start_response(status, headers, exc_info)
        return self.app(environ, recording_start_response)


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # one thread per connection, so a keep-alive client never blocks another


class Handler(WSGIRequestHandler):
    def get_environ(self):
        # For the log, keep the request target as sent (PATH_INFO is percent-decoded) and the headers as
        # sent (wsgiref fills in CONTENT_TYPE=text/plain when there was none), under our own keys.
        environ = super().get_environ()
        environ["producer.target"] = self.path
        sent = {name.lower(): value for name, value in self.headers.items()}
        environ["producer.headers"] = {name: sent[name.lower()] for name in RequestLog.HEADERS
                                       if name.lower() in sent}
        return environ

    def log_message(self, *args):  # keep stderr for pyslet's tracebacks; the request log is at /_log
        pass


def main():
    apply_patches()
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    httpd = ThreadingWSGIServer(("127.0.0.1", port), Handler)
    # pyslet needs the absolute service root up front, so bind first (PORT 0 = any free port).
    root = "http://127.0.0.1:%d/" % httpd.server_port
    server = Server(service_root=root)
    if len(sys.argv) > 2:
        server.topmax = int(sys.argv[2])  # server-side page size (pyslet's default is 100)
    server.set_model(build_container())
    httpd.set_app(RequestLog(server))
    print("READY " + root, flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
