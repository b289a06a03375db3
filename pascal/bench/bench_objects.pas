{ bench_objects — seed 003's small-objects experiment in Free Pascal:
  create and free 10 million small objects, the same as records with
  New/Dispose, and a tree of generic nodes that carry a string. One thread. }
program bench_objects;

{$mode objfpc}{$H+}

uses
  {$ifdef MM_SHOAL} ShoalMM, {$endif}
  {$ifdef MM_CMEM} cmem, {$endif}
  {$ifdef unix} cthreads, UnixType, Linux, {$else} Windows, {$endif} SysUtils;

{$i benchutil.inc}

type
  TSmallObject = class
    X, Y: LongInt;
    Next: TSmallObject;
  end;

  TSmallRecord = record
    X, Y: LongInt;
    Next: Pointer;
  end;
  PSmallRecord = ^TSmallRecord;

  generic TNode<T> = class
    Left, Right: TNode;
    Key: T;
    Name: string;
    constructor Create(AKey: T);
    destructor Destroy; override;
  end;

  TIntNode = specialize TNode<LongInt>;

constructor TNode.Create(AKey: T);
begin
  Key := AKey;
  Name := 'node ' + IntToStr(AKey);
end;

destructor TNode.Destroy;
begin
  Left.Free;
  Right.Free;
  inherited Destroy;
end;

const
  Batch = 1000;   { objects alive at once }

var
  Count: Int64;
  TreeNodes: Int64;

procedure Objects;
var
  Items: array[0..Batch - 1] of TSmallObject;
  Round, i: Int64;
begin
  for Round := 1 to Count div Batch do
  begin
    for i := 0 to Batch - 1 do
    begin
      Items[i] := TSmallObject.Create;
      Items[i].X := i;
    end;
    for i := 0 to Batch - 1 do
      Items[i].Free;
  end;
end;

procedure Records;
var
  Items: array[0..Batch - 1] of PSmallRecord;
  Round, i: Int64;
begin
  for Round := 1 to Count div Batch do
  begin
    for i := 0 to Batch - 1 do
    begin
      New(Items[i]);
      Items[i]^.X := i;
    end;
    for i := 0 to Batch - 1 do
      Dispose(Items[i]);
  end;
end;

procedure Tree;
var
  Root, Node: TIntNode;
  i, Key: Int64;
begin
  RandSeed := 42;
  Root := TIntNode.Create(High(LongInt) div 2);
  for i := 2 to TreeNodes do
  begin
    Key := Random(High(LongInt));
    Node := Root;
    repeat
      if Key < Node.Key then
      begin
        if Node.Left = nil then
        begin
          Node.Left := TIntNode.Create(Key);
          break;
        end;
        Node := Node.Left;
      end
      else
      begin
        if Node.Right = nil then
        begin
          Node.Right := TIntNode.Create(Key);
          break;
        end;
        Node := Node.Right;
      end;
    until False;
  end;
  Root.Free;
end;

begin
  Count := Scaled(10000000);
  if Count < Batch then
    Count := Batch;
  TreeNodes := Scaled(300000);
  Measure('objects', Format('%d small objects, Create/Free', [Count]), @Objects);
  Measure('objects', Format('%d small records, New/Dispose', [Count]), @Records);
  Measure('objects', Format('tree of %d generic nodes with a string', [TreeNodes]), @Tree);
end.
